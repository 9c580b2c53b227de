"""Runs ``gpufleet.benchmarks.agent_freeze`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.agent_freeze import main

if __name__ == "__main__":
    raise SystemExit(main())
