"""Simulation: trace loaders, experiments, reports."""
