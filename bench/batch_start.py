"""Runs ``gpufleet.benchmarks.batch_start`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.batch_start import main

if __name__ == "__main__":
    raise SystemExit(main())
