"""Runs ``gpufleet.benchmarks.placement_report`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.placement_report import main

if __name__ == "__main__":
    raise SystemExit(main())
