"""Runs ``gpufleet.benchmarks.alloc_filters`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.alloc_filters import main

if __name__ == "__main__":
    raise SystemExit(main())
