"""Elastic node pools in the core: power states, decisions, the master that ties them in."""

from gpufleet.core.elastic.book import Power
from gpufleet.core.elastic.master import TIMER, ElasticMaster

__all__ = ["TIMER", "ElasticMaster", "Power"]
