"""Runs ``gpufleet.benchmarks.container_start`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.container_start import main

if __name__ == "__main__":
    raise SystemExit(main())
