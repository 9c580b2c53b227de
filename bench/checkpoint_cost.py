"""Runs ``gpufleet.benchmarks.checkpoint_cost`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.checkpoint_cost import main

if __name__ == "__main__":
    raise SystemExit(main())
