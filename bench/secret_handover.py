"""Runs ``gpufleet.benchmarks.secret_handover`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.secret_handover import main

if __name__ == "__main__":
    raise SystemExit(main())
