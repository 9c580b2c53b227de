"""Installing gpufleet on real hosts: the venv under /opt/gpufleet (``venv.py``), the systemd
units (``units.py``), the files of ``/etc/gpufleet`` that ``gpufleet setup controller|node``
writes (``setup.py``), each write idempotent (``files.py``). ADR 0035."""
