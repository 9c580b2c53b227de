"""Run the asked-for layers in order, each into the same report; a layer that crashes is a
FAIL row of its own, never the end of the run."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence

from gpufleet.client import Client
from gpufleet.ops.validate import (
    application,
    clock,
    device,
    monitoring,
    network,
    scheduler,
    storage,
)
from gpufleet.ops.validate.checks import LAYERS, Check, Report, failed
from gpufleet.ops.validate.context import Context
from gpufleet.ops.validate.settings import Settings

RUNNERS: dict[str, Callable[[Context], list[Check]]] = {
    "device": device.checks,
    "network": network.checks,
    "storage": storage.checks,
    "clock": clock.checks,
    "scheduler": scheduler.checks,
    "application": application.checks,
    "monitoring": monitoring.checks,
}


def parse_layers(text: str | None) -> list[str]:
    """``"device,network"`` → those layers in their canonical order; ValueError if unknown."""
    if not text or text.strip() == "all":
        return list(LAYERS)
    asked = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in asked if x not in LAYERS]
    if unknown:
        raise ValueError(f"unknown layer {unknown[0]!r}: choose from {', '.join(LAYERS)}")
    return [x for x in LAYERS if x in asked]


def validate(
    client: Client,
    settings: Settings,
    layers: Sequence[str] = LAYERS,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> Report:
    report = Report(str(client.http.base_url), list(layers), time.time())
    ctx = Context(client, settings, layers, log=log)
    for layer in layers:
        log(f"layer {layer}")
        try:
            report.add(RUNNERS[layer](ctx))
        except Exception as e:  # one broken layer must not hide the others' results
            tb = traceback.format_exc().strip().splitlines()[-1]
            report.add([failed(layer, "layer", "cluster", "crashed", "completes", f"{e!r}: {tb}")])
    report.finished = time.time()
    return report
