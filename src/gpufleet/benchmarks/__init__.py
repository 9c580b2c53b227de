"""Benchmarks of the scheduler, importable by ``gpufleet bench`` and by ``bench/`` scripts."""
