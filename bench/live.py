"""Runs ``gpufleet.benchmarks.live`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.live import main

if __name__ == "__main__":
    raise SystemExit(main())
