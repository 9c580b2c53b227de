"""Runs ``gpufleet.benchmarks.listing`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.listing import main

if __name__ == "__main__":
    raise SystemExit(main())
