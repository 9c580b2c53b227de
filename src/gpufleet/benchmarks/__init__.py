"""Benchmarks: the scheduler's (``gpufleet bench``) and the figures of BENCHMARKS.md, each a
module with a ``main()``; ``bench/*.py`` are the scripts that run them from a checkout."""
