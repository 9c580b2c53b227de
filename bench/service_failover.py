"""Runs ``gpufleet.benchmarks.service_failover`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.service_failover import main

if __name__ == "__main__":
    raise SystemExit(main())
