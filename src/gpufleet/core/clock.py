"""Moved to ``gpufleet.base.clock`` (issue 27: every layer reads the Clock, and the agent must
not import core for it). This alias stays only while branches written before the move land;
import ``gpufleet.base.clock``."""

from gpufleet.base.clock import Clock, ManualClock

__all__ = ["Clock", "ManualClock"]
