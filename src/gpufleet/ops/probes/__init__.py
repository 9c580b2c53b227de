"""The programs that ``gpufleet validate`` and ``gpufleet doctor`` run as jobs on the nodes.

They use only the standard library of Python 3.9 or newer, plus nvidia-smi, dcgmi, iperf3, fio and
PyTorch when a node has them, so they run on any node whatever it has installed. A job does not
import them from an installed gpufleet: ``bundle.command`` packs the modules into one
``python3 -c`` program (see ``bundle.py``). Each probe prints one result line,
``GPUFLEET-PROBE {json}``, on stdout; the caller reads it back through the job's logs.

Modules: ``common`` (result line, commands, the clock), ``gpu`` (driver, devices, NVML,
nvidia-smi, DCGM, a PyTorch compute and memory-bandwidth check), ``system`` (interfaces, routes,
time synchronisation), ``clock`` (offset from the controller's clock), ``storage`` (shared
marker, throughput, IOPS), ``node`` (the per-node probe: any of those sections), ``net`` (the
gang's TCP/iperf3 bandwidth and latency test), ``nccl`` (NCCL all-reduce bus bandwidth).
"""
