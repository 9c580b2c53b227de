"""What every layer may import: the clock, the CLI's and shims' server settings, and secrets on
disk. Standard library only (``settings`` loads yaml lazily, only when a config file exists),
so the lowest layer (``model``) and a task-side process alike can use it; ``.importlinter``
keeps it at the bottom of the layers."""
