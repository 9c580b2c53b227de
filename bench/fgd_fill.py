"""Runs ``gpufleet.benchmarks.fgd_fill`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.fgd_fill import main

if __name__ == "__main__":
    raise SystemExit(main())
