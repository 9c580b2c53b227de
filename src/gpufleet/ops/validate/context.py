"""What the layers of one validation run share: the client, the settings, the nodes as the
run found them, and the per-node probe (run once, with the sections every asked-for layer
needs, then read by each of them)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from gpufleet.api.schemas import NodeOut
from gpufleet.client import Client
from gpufleet.ops.probes import bundle
from gpufleet.ops.validate.jobs import Prober, ProbeRun, whole_node_groups
from gpufleet.ops.validate.settings import Settings

# the node probe's sections each layer reads
SECTIONS = {
    "device": ("gpu", "system"),
    "storage": ("storage",),
    "clock": ("clock", "system"),
    "network": ("system",),
    "application": ("gpu",),
}
BUSY = ("mixed", "allocated")
HEALTHY = ("idle", "mixed", "allocated")


@dataclass
class Context:
    client: Client
    settings: Settings
    layers: Sequence[str]
    log: Callable[[str], None] = lambda _: None
    nodes: list[NodeOut] = field(default_factory=list)
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    _prober: Prober | None = None
    _node_probe: ProbeRun | None = None
    _metrics: str | None = None
    _metrics_error: str = ""

    def __post_init__(self) -> None:
        if not self.nodes:
            self.nodes = sorted(self.client.nodes(), key=lambda n: n.name)
        s = self.settings
        self._prober = Prober(
            self.client,
            queue=s.queue,
            priority=s.priority,
            start_timeout_s=s.start_timeout_s,
            run_timeout_s=s.run_timeout_s,
            log=self.log,
        )

    @property
    def prober(self) -> Prober:
        assert self._prober is not None
        return self._prober

    @property
    def controller_url(self) -> str:
        return self.settings.probe_controller or str(self.client.http.base_url)

    def targets(self) -> list[NodeOut]:
        """The nodes probes can run on: idle (a whole-node job must fit), with GPUs."""
        return [n for n in self.nodes if n.state == "idle" and n.gpus > 0]

    def untargeted(self) -> list[tuple[NodeOut, str]]:
        """The nodes probes cannot reach, and why."""
        out = []
        for n in self.nodes:
            if n.state in BUSY:
                out.append(
                    (n, f"busy ({n.state}: {', '.join(n.jobs) or 'jobs'}); probes need it idle")
                )
            elif n.state not in HEALTHY:
                out.append((n, f"{n.state}" + (f": {n.why}" if n.why else "")))
            elif n.gpus == 0:
                out.append((n, "no GPUs: a whole-node probe cannot be pinned to it"))
        return out

    def whole_node_runs(
        self, name: str, probe: str, args: Sequence[str], nodes: Sequence[NodeOut] | None = None
    ) -> list[ProbeRun]:
        """One gang per GPU count over ``nodes`` (default: the targets), side by side."""
        specs = []
        for gpus, group in whole_node_groups(self.targets() if nodes is None else nodes):
            cmd = bundle.command(self.settings.python, probe, args)
            specs.append(
                (
                    f"{name}-{gpus}g",
                    self.prober.spec(f"validate-{name}", cmd, workers=len(group), gpus=gpus),
                )
            )
        return self.prober.run_many(specs)

    def node_probe(self) -> ProbeRun:
        """The per-node probe, once per run, with the sections the run's layers read."""
        if self._node_probe is None:
            self._node_probe = self._run_node_probe()
        return self._node_probe

    def _run_node_probe(self) -> ProbeRun:
        s = self.settings
        sections = sorted({sec for layer in self.layers for sec in SECTIONS.get(layer, ())})
        args = ["--sections", ",".join(sections), "--controller", self.controller_url]
        if "device" in self.layers:
            args += ["--dcgm-level", str(s.dcgm_level), "--torch-checks"]
            args += ["--seconds", str(s.compute_seconds)]
        if "storage" in self.layers:
            args += ["--storage-mb", str(s.storage_mb), "--storage-seconds", str(s.storage_seconds)]
            if s.shared:
                args += ["--shared", s.shared, "--token", self.token]
            path = s.storage_path or s.shared
            if path:
                args += ["--storage-path", path]
        self.log(f"node probe on {len(self.targets())} nodes: {', '.join(sections)}")
        runs = self.whole_node_runs("node", "node", args)
        merged = ProbeRun("node")
        for r in runs:
            merged.ranks.extend(r.ranks)
            merged.error = "; ".join(x for x in (merged.error, r.error) if x)
            if merged.job is None or (r.job is not None and r.job.state != "SUCCEEDED"):
                merged.job = r.job
        return merged

    def metrics(self) -> str | None:
        """The controller's ``/metrics`` text; None (with ``metrics_error``) when it has none."""
        if self._metrics is None and not self._metrics_error:
            try:
                r = self.client.http.get("/metrics")
                if r.status_code == 200:
                    self._metrics = r.text
                elif r.status_code in (401, 403):  # this token may not read it: not a fault
                    self._metrics_error = (
                        f"GET /metrics answered {r.status_code}: it needs a metrics or admin "
                        "token, and this validate runs with another"
                    )
                else:
                    self._metrics_error = f"GET /metrics answered {r.status_code}"
            except httpx.HTTPError as e:
                self._metrics_error = f"GET /metrics failed: {e}"
        return self._metrics

    @property
    def metrics_error(self) -> str:
        return self._metrics_error

    def controller_time(self) -> float:
        """The controller's clock (its /healthz ``time``), else this machine's."""
        t = self.client.health().get("time")
        return float(t) if isinstance(t, int | float) else time.time()
