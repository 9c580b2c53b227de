"""Runs ``gpufleet.benchmarks.gateway_latency`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.gateway_latency import main

if __name__ == "__main__":
    raise SystemExit(main())
