"""Runs ``gpufleet.benchmarks.store`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.store import main

if __name__ == "__main__":
    raise SystemExit(main())
