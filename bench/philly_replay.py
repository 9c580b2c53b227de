"""Runs ``gpufleet.benchmarks.philly_replay`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.philly_replay import main

if __name__ == "__main__":
    raise SystemExit(main())
