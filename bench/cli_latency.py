"""Runs ``gpufleet.benchmarks.cli_latency`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.cli_latency import main

if __name__ == "__main__":
    raise SystemExit(main())
