"""Runs ``gpufleet.benchmarks.auth`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.auth import main

if __name__ == "__main__":
    raise SystemExit(main())
