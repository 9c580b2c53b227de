"""Runs ``gpufleet.benchmarks.sweep`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.sweep import main

if __name__ == "__main__":
    raise SystemExit(main())
