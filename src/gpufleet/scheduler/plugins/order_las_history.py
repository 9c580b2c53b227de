"""LAS with a history predictor (issue 24): Tiresias' 2D-LAS (``order/las``) whose queues are
ordered by the expected remaining service the cluster's own finished jobs predict (``within:
history``, in the spirit of Helios' QSSF and Lucid's estimator: nobody states a duration), with
more queues (Tiresias' sensitivity analysis varies K and the thresholds: here six, each 4 ×
the last from 3,200 GPU-s) and PROMOTEKNOB 16, and a job that cannot save at a stop preempted
only where the history says the exchange gains (``exchange`` 3). The options are
``order/las``'s."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.scheduler.plugins import order_las

NAME = "order/las-history"

THRESHOLDS_GPU_S = (3200.0, 12800.0, 51200.0, 204800.0, 819200.0)


class Plugin(order_las.Plugin):
    def __init__(
        self,
        thresholds_gpu_s: Sequence[float] = THRESHOLDS_GPU_S,
        starvation_factor: float = 16.0,
        within: str = "history",
        history_window: int = 200,
        starvation_cap_s: float = 0.0,
        age_limit_s: float = 0.0,
        aged_share: float = 1.0,
        min_run_s: float = 0.0,
        aged_by: str = "age",
        aged_slack: float = 0.0,
        fifo_slack: float = 0.0,
        fifo_floor_q: float = 0.0,
        kept: str = "aged",
        unsaved_once: bool = True,
        exchange: float = 3.0,
    ) -> None:
        super().__init__(
            thresholds_gpu_s,
            starvation_factor,
            within,
            history_window,
            starvation_cap_s,
            age_limit_s,
            aged_share,
            min_run_s,
            aged_by,
            aged_slack,
            fifo_slack,
            fifo_floor_q,
            kept,
            unsaved_once,
            exchange,
        )
