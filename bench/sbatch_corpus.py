"""Runs ``gpufleet.benchmarks.sbatch_corpus`` on tests/unit/sbatch_corpus (its docstring says
what it measures and how)."""

from pathlib import Path

from gpufleet.benchmarks.sbatch_corpus import main

if __name__ == "__main__":
    raise SystemExit(main(default=Path(__file__).resolve().parents[1] / "tests/unit/sbatch_corpus"))
