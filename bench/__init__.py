"""The figures of BENCHMARKS.md: each module a script with a ``main()``, run from a checkout as
``python bench/X.py`` or ``python -m bench.X``; not shipped with the package. The scheduler's own
benchmark, ``gpufleet bench``, is ``gpufleet.sim.placement_bench``."""
