"""Runs ``gpufleet.benchmarks.metrics_scrape`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.metrics_scrape import main

if __name__ == "__main__":
    raise SystemExit(main())
