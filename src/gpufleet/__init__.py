"""gpufleet: plan, validate, schedule, monitor and diagnose a GPU cluster."""

__version__ = "0.1.0"
