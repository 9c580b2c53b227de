"""Runs ``gpufleet.benchmarks.estimate_accuracy`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.estimate_accuracy import main

if __name__ == "__main__":
    raise SystemExit(main())
