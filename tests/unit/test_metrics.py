"""The /metrics collector on a ControllerService built in-process (no loop, no HTTP): GPU series
under dcgm-exporter's names, types and labels with the job holding each GPU, host and scheduler
families, the wait-time histogram fed by committed transitions, and nothing secret in the text."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import node_spec, profile, spec
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gpufleet.agent.gpu import DCGM_FIELDS, TaskUse, metrics_payload
from gpufleet.agent.health import CRITICAL_XIDS as AGENT_CRITICAL_XIDS
from gpufleet.agent.simgpu import SimulatedGpus
from gpufleet.base.clock import ManualClock
from gpufleet.core.commands import Launch, NodeEvent
from gpufleet.core.events import (
    JobCancelled,
    JobSubmitted,
    NodeHealth,
    NodeLost,
    NodeUp,
    TaskStarted,
)
from gpufleet.model.catalog import lookup
from gpufleet.model.job import JobSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI, Resources
from gpufleet.server.logs import LogStore
from gpufleet.server.metrics import (
    CRITICAL_XIDS,
    DCGM_METRICS,
    DEFAULT_COUNTERS,
    FleetCollector,
    metric_names,
)
from gpufleet.server.metrics.catalog import ENCODER_METRICS
from gpufleet.server.service import ControllerService, NodeLink

T0 = 1_700_000_000.0
RULES = Path(__file__).parents[2] / "src/gpufleet/monitoring/rules/gpufleet.rules.yml"


class Fleet:
    """Two 8-GPU nodes; job ``j1`` (alice, queue vision) runs on 4 GPUs of n00."""

    def __init__(self, tmp: Path) -> None:
        self.clock = ManualClock(T0)
        self.svc = ControllerService(
            None, profile(), self.clock, logs=LogStore(tmp / "logs"), min_pass_gap_s=0.0
        )
        self.ctrl = self.svc.ctrl
        self.ctrl.queues["vision"] = QueueSpec("vision", Resources(4 * MILLI, 10**9, 10**9))
        self.sims: dict[str, SimulatedGpus] = {}
        self.coll = FleetCollector(self.svc)
        for n in ("n00", "n01"):
            self.ctrl.handle(T0, NodeUp(node_spec(n)), schedule=False)
            self.svc.links[n] = NodeLink(n, T0, driver_version="550.54.15", cuda_version="12.4")
            self.sims[n] = SimulatedGpus(lookup("H100"), 8, n, start=T0)

    def submit(self, job_id: str, s: JobSpec, at: float) -> list[Any]:
        self.clock.set(at)
        out = self.ctrl.handle(at, JobSubmitted(job_id, s, at - 30))
        for c in out:
            if isinstance(c, Launch):
                out += self.ctrl.handle(
                    at, *(TaskStarted(c.job_id, c.attempt, r) for r in range(len(c.allocation)))
                )
        return out

    def heartbeat(
        self, now: float, xids: dict[int, int] | None = None, video: frozenset[str] = frozenset()
    ) -> None:
        """Each node's sample as its agent sends it: each running job one process (a made-up
        pid) on its GPUs there, the jobs in ``video`` encoding."""
        pids = {jid: 4000 + i for i, jid in enumerate(sorted(self.ctrl.running))}
        job_of = {pid: jid for jid, pid in pids.items()}.get
        for name, sim in self.sims.items():
            node = self.ctrl.nodes[name]
            uses = [
                TaskUse(pids[jid], p.gpus, p.gpu_milli / MILLI, jid in video)
                for jid, r in self.ctrl.running.items()
                for p in r.allocation
                if p.node == name
            ]
            sim.set_load({d: 1.0 - g / MILLI for d, g in enumerate(node.gpu_free)}, now, uses)
            self.svc.links[name].metrics = metrics_payload(
                sim.sample(now), xids or {}, {"cpu_percent": 12.5, "net_rx_bytes": 1e9}, job_of
            )
            self.svc.links[name].last_seen = now

    def text(self) -> str:
        return self.coll.render().decode()


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    f = Fleet(tmp_path)
    out = f.submit("j1", spec("train", gpus=4, queue="vision", user="alice"), T0 + 1)
    f.coll.on_commit(T0 + 1, [c for c in out if type(c).__name__ == "Transition"], [])
    f.heartbeat(T0 + 2)
    f.clock.set(T0 + 3)
    return f


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of ``name`` exactly (no ``_total`` added), parsed by hand."""
    out = []
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', head))
        out.append((labels, float(value)))
    return out


def test_the_text_parses_and_keeps_dcgm_exporters_names_and_types(fleet: Fleet) -> None:
    text = fleet.text()
    fams = {f.name: f for f in text_string_to_metric_families(text)}  # a real parser agrees
    assert fams["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    assert fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    # dcgm-exporter's counters have no _total: the TYPE line and the samples say the same name
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert series(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        *(c for c in DEFAULT_COUNTERS if c != "DCGM_FI_DEV_ENC_UTIL"),
    ):
        assert len(series(text, name)) == 16, name  # 2 nodes x 8 GPUs
    assert not series(text, "DCGM_FI_DEV_ENC_UTIL")  # H100s: NVDEC, no NVENC (model/engines.py)
    # every field the agent sends is published, under a type dcgm-exporter gives it
    assert set(DCGM_FIELDS.values()) <= set(DCGM_METRICS)
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in text  # the deprecated name
    for f in text_string_to_metric_families(text):
        assert f.type in ("gauge", "counter", "histogram"), f.name


def test_gpu_labels_are_dcgm_exporters_plus_the_job_holding_the_gpu(fleet: Fleet) -> None:
    rows = series(fleet.text(), "DCGM_FI_DEV_GPU_UTIL")
    by_gpu = {(lb["Hostname"], lb["gpu"]): (lb, v) for lb, v in rows}
    held = {d for p in fleet.ctrl.jobs["j1"].allocation for d in p.gpus}
    for (host, gpu), (lb, v) in by_gpu.items():
        assert {
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "Hostname",
            "hostname",
            "DCGM_FI_DRIVER_VERSION",
        } <= set(lb)
        assert lb["UUID"].startswith("GPU-") and lb["device"] == f"nvidia{gpu}"
        assert lb["modelName"] == "NVIDIA H100 80GB HBM3"  # NVML's name, as dcgm-exporter's
        assert lb["hostname"] == lb["Hostname"] == host
        assert lb["DCGM_FI_DRIVER_VERSION"] == "550.54.15"
        if host == "n00" and int(gpu) in held:
            assert (lb["hpc_job"], lb["queue"], lb["user"]) == ("j1", "vision", "alice")
            assert v == 100.0  # the simulated GPU is as busy as its allocation
        else:
            assert "hpc_job" not in lb and "job" not in lb and v == 0.0


def test_without_user_labels_no_series_names_a_user(fleet: Fleet) -> None:
    """A public /metrics (``--metrics-public`` without ``--metrics-user-labels``): the jobs'
    GPU series keep hpc_job and queue, and the user's name is nowhere in the text."""
    fleet.coll.user_labels = False
    text = fleet.text()
    held = [lb for lb, _ in series(text, "DCGM_FI_DEV_GPU_UTIL") if "hpc_job" in lb]
    idle = [lb for lb, _ in series(text, "gpufleet_gpu_allocated_idle")]
    assert held and idle
    assert all((lb["hpc_job"], lb["queue"]) == ("j1", "vision") for lb in held + idle)
    assert "user=" not in text and "alice" not in text


def test_a_shared_gpu_has_a_series_per_job_as_dcgm_exporters_hpc_mapping(
    tmp_path: Path,
) -> None:
    f = Fleet(tmp_path)
    f.submit("a", spec("a", milli=500, user="alice"), T0 + 1)
    f.submit("b", spec("b", milli=500, user="bob"), T0 + 1)
    f.heartbeat(T0 + 2)
    rows = series(f.text(), "DCGM_FI_DEV_POWER_USAGE")
    jobs_on = {}
    for lb, _ in rows:
        jobs_on.setdefault((lb["Hostname"], lb["gpu"]), set()).add(lb.get("hpc_job"))
    assert {"a", "b"} in list(jobs_on.values())
    assert len(rows) == 17


def test_host_scheduler_and_node_families(fleet: Fleet) -> None:
    f = fleet
    f.submit("more", spec("more", gpus=4, queue="vision", user="bob"), T0 + 4)  # quota full
    f.clock.set(T0 + 10)
    text = f.text()
    assert series(text, "gpufleet_host_cpu_utilization_percent") == [
        ({"Hostname": "n00"}, 12.5),
        ({"Hostname": "n01"}, 12.5),
    ]
    assert "# TYPE gpufleet_host_network_receive_bytes_total counter" in text
    pend = series(text, "gpufleet_jobs_pending")
    assert pend == [({"queue": "vision", "reason": "Quota"}, 1.0)]
    assert series(text, "gpufleet_queue_oldest_pending_seconds") == [({"queue": "vision"}, 36.0)]
    assert series(text, "gpufleet_queue_quota_gpus") == [({"queue": "vision"}, 4.0)]
    assert series(text, "gpufleet_queue_allocated_gpus") == [({"queue": "vision"}, 4.0)]
    assert series(text, "gpufleet_queue_quota_used_ratio") == [({"queue": "vision"}, 1.0)]
    assert series(text, "gpufleet_jobs_running") == [({"queue": "vision"}, 1.0)]
    assert series(text, "gpufleet_gpus") == [({}, 16.0)]
    assert series(text, "gpufleet_gpus_allocated") == [({}, 4.0)]
    assert series(text, "gpufleet_gpus_in_use") == [({}, 4.0)]
    assert series(text, "gpufleet_gpus_allocated_idle") == [({}, 0.0)]
    states = {lb["node"]: lb["state"] for lb, v in series(text, "gpufleet_node_state") if v == 1}
    assert states == {"n00": "mixed", "n01": "idle"}
    assert series(text, "gpufleet_node_heartbeat_age_seconds") == [
        ({"node": "n00"}, 8.0),
        ({"node": "n01"}, 8.0),
    ]
    assert ({"node": "n00", "driver_version": "550.54.15", "cuda_version": "12.4"}, 1.0) in (
        series(text, "gpufleet_node_info")
    )
    share = dict((lb["queue"], v) for lb, v in series(text, "gpufleet_queue_dominant_share"))
    assert share["vision"] == pytest.approx(4 / 16)


def test_wait_time_histogram_counts_first_starts_only(fleet: Fleet) -> None:
    text = fleet.text()
    buckets = {lb["le"]: v for lb, v in series(text, "gpufleet_job_wait_seconds_bucket")}
    assert buckets["10"] == 0 and buckets["30"] == 1 and buckets["60"] == 1  # waited 30 s
    assert buckets["+Inf"] == 1
    assert series(text, "gpufleet_job_wait_seconds_sum") == [({"queue": "vision"}, 30.0)]
    assert series(text, "gpufleet_job_wait_seconds_count") == [({"queue": "vision"}, 1.0)]
    moved = dict((lb["state"], v) for lb, v in series(text, "gpufleet_job_transitions_total"))
    assert moved == {"PENDING": 1, "STARTING": 1, "RUNNING": 1}


def test_allocated_but_idle_gpus(fleet: Fleet) -> None:
    f = fleet
    for g in f.svc.links["n00"].metrics["gpus"]:
        g["values"]["DCGM_FI_DEV_GPU_UTIL"] = 2.0  # the job holds them and does nothing
    text = f.text()
    idle = series(text, "gpufleet_gpu_allocated_idle")
    assert len(idle) == 4 and all(v == 1 and lb["hpc_job"] == "j1" for lb, v in idle)
    assert series(text, "gpufleet_gpus_allocated_idle") == [({}, 4.0)]
    assert series(text, "gpufleet_gpus_in_use") == [({}, 0.0)]


def test_health_xid_and_node_events(fleet: Fleet) -> None:
    f = fleet
    f.heartbeat(T0 + 4, xids={0: 79})
    cmds = f.ctrl.handle(T0 + 4, NodeHealth("n00", False, "GPU 0: XID 79", (0,)))
    f.coll.on_commit(T0 + 4, [], [c for c in cmds if isinstance(c, NodeEvent)])
    text = f.text()
    assert (
        {"gpu": "0", "UUID": f.sims["n00"]._gpus[0].uuid, "Hostname": "n00", "xid": "79"},
        1.0,
    ) in (series(text, "gpufleet_gpu_last_xid_info"))
    healthy = {(lb["Hostname"], lb["gpu"]): v for lb, v in series(text, "gpufleet_gpu_healthy")}
    assert healthy[("n00", "0")] == 0 and healthy[("n00", "1")] == 1 and healthy[("n01", "0")] == 1
    assert series(text, "gpufleet_node_health_drained") == [
        ({"node": "n00"}, 1.0),
        ({"node": "n01"}, 0.0),
    ]
    events = {lb["event"]: v for lb, v in series(text, "gpufleet_node_events_total")}
    assert events == {"unhealthy": 1, "drained": 1}
    states = {lb["node"]: lb["state"] for lb, v in series(text, "gpufleet_node_state") if v == 1}
    assert states["n00"] == "unhealthy"


def test_a_lost_node_has_no_gpu_series_and_is_down(fleet: Fleet) -> None:
    f = fleet
    f.ctrl.handle(T0 + 20, NodeLost("n01", "no heartbeat"))
    text = f.text()
    assert {lb["Hostname"] for lb, _ in series(text, "DCGM_FI_DEV_GPU_TEMP")} == {"n00"}
    assert series(text, "gpufleet_node_up") == [({"node": "n00"}, 1.0), ({"node": "n01"}, 0.0)]
    assert {lb["Hostname"] for lb, _ in series(text, "gpufleet_host_cpu_utilization_percent")} == {
        "n00"
    }


def test_nothing_secret_and_odd_values_are_escaped_or_dropped(tmp_path: Path) -> None:
    f = Fleet(tmp_path)
    secret_spec = replace(
        spec("s", user='eve"\\\nx'),
        command=("train", "--api-key=sk-SECRET-1"),
        env=(("HF_TOKEN", "hf_SECRET_2"),),
    )
    f.submit("s1", secret_spec, T0 + 1)
    f.heartbeat(T0 + 2)
    g = f.svc.links["n00"].metrics["gpus"][0]
    g["values"]["DCGM_FI_DEV_GPU_TEMP"] = "hot"  # not a number: dropped
    g["values"]["DCGM_FI_EVIL"] = 1  # not a dcgm field we publish: dropped
    g["values"]["DCGM_FI_DEV_FB_USED"] = True  # a bool is no number either
    text = f.text()
    assert "SECRET" not in text and "train" not in text and "HF_TOKEN" not in text
    assert "DCGM_FI_EVIL" not in text and "hot" not in text
    assert 'user="eve\\"\\\\\\nx"' in text  # quote, backslash and newline escaped
    list(text_string_to_metric_families(text))  # and it still parses


def test_collect_gives_the_same_families_to_a_registry(fleet: Fleet) -> None:
    reg = CollectorRegistry()
    reg.register(fleet.coll)
    fams = {m.name: m for m in reg.collect()}
    assert set(fams) == {f.name for f in fleet.coll.families() if f.samples}
    util = fams["DCGM_FI_DEV_GPU_UTIL"]
    assert util.type == "gauge" and len(util.samples) == 16
    assert metric_names(fleet.coll.families()) >= {"DCGM_FI_DEV_GPU_UTIL", "gpufleet_node_up"}


def test_critical_xids_match_the_agents_health_check_and_the_alert_rule() -> None:
    assert set(AGENT_CRITICAL_XIDS) == CRITICAL_XIDS
    rules = yaml.safe_load(RULES.read_text())
    expr = next(
        r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GpuCriticalXid"
    )
    m = re.search(r'xid=~"([0-9|]+)"', expr)
    assert m is not None, expr
    assert {int(x) for x in m.group(1).split("|")} == CRITICAL_XIDS


def _pending_from_the_snapshot(f: Fleet, now: float) -> tuple[dict[Any, int], dict[str, float]]:
    """What the pending families must say, worked out the slow way (every pending job)."""
    reasons = f.ctrl.last.reasons if f.ctrl.last is not None else None
    counts: dict[Any, int] = {}
    oldest: dict[str, float] = {}
    for p in f.ctrl.snapshot(now).pending:
        r = reasons.raw(p.id) if reasons is not None else None
        key = (p.spec.queue, r.code.value if r is not None else "Unscheduled")
        counts[key] = counts.get(key, 0) + 1
        oldest[p.spec.queue] = max(oldest.get(p.spec.queue, 0.0), now - p.submit_time)
    return counts, oldest


def test_the_pending_families_follow_each_commit(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = fleet
    snapshot = f.ctrl.snapshot

    def commit(at: float, *events: Any) -> None:
        f.clock.set(at)
        out = f.ctrl.handle(at, *events)
        f.coll.on_commit(at, [c for c in out if type(c).__name__ == "Transition"], [])

    for i, q in enumerate(("vision", "vision", "nlp", "nlp", "nlp")):  # vision's quota is full
        commit(T0 + 4 + i, JobSubmitted(f"p{i}", spec(f"p{i}", gpus=8, queue=q), T0 + i))
    commit(T0 + 10, JobCancelled("p2"))
    for at in (T0 + 11, T0 + 12):  # a second scrape, with nothing committed between
        f.clock.set(at)
        with monkeypatch.context() as m:  # a scrape reads the tally, never every pending job
            m.setattr(f.ctrl, "snapshot", lambda now: pytest.fail("the scrape took a snapshot"))
            text = f.text()
        assert f.ctrl.snapshot == snapshot
        counts, oldest = _pending_from_the_snapshot(f, at)
        pend = {(lb["queue"], lb["reason"]): v for lb, v in series(text, "gpufleet_jobs_pending")}
        assert pend == counts and sum(counts.values()) == 4  # p2 was cancelled
        got = series(text, "gpufleet_queue_oldest_pending_seconds")
        assert {lb["queue"]: v for lb, v in got} == oldest


def test_pending_jobs_the_collector_never_saw_committed_are_counted(tmp_path: Path) -> None:
    f = Fleet(tmp_path)  # jobs submitted without on_commit: as after a restore from the store
    f.submit("a", spec("a", gpus=16, queue="vision"), T0 + 1)
    f.submit("b", spec("b", gpus=2), T0 + 2)
    f.clock.set(T0 + 5)
    counts, _ = _pending_from_the_snapshot(f, T0 + 5)
    pend = {(lb["queue"], lb["reason"]): v for lb, v in series(f.text(), "gpufleet_jobs_pending")}
    assert pend == counts and sum(counts.values()) >= 1


# dcgm-exporter's etc/default-counters.csv (3.x and later), as (field, Prometheus type): written
# here from what that file lists, so a rename or a changed type on either side fails this test
DCGM_EXPORTER_DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "gauge",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "gauge",
}


def test_every_default_counter_of_dcgm_exporter_is_emitted_with_its_type(fleet: Fleet) -> None:
    assert len(DCGM_EXPORTER_DEFAULT_COUNTERS) == 25
    assert set(DEFAULT_COUNTERS) == set(DCGM_EXPORTER_DEFAULT_COUNTERS)
    text = fleet.text()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for name, kind in DCGM_EXPORTER_DEFAULT_COUNTERS.items():
        assert DCGM_METRICS[name][0] == kind, name
        if name == "DCGM_FI_DEV_ENC_UTIL":  # only GPUs with NVENC: the next test
            assert not series(text, name)
            continue
        assert types.get(name) == kind, name  # emitted, with dcgm-exporter's type
        assert len(series(text, name)) == 16, name  # for every GPU of both nodes


def test_encoder_and_decoder_series_only_for_gpus_that_have_those_engines(fleet: Fleet) -> None:
    fleet.sims["n01"] = SimulatedGpus(lookup("L40S"), 8, "n01", start=T0)  # 3 NVENC, 3 NVDEC
    fleet.heartbeat(T0 + 4)
    text = fleet.text()
    assert {lb["Hostname"] for lb, _ in series(text, "DCGM_FI_DEV_ENC_UTIL")} == {"n01"}
    assert len(series(text, "DCGM_FI_DEV_ENC_UTIL")) == 8
    assert len(series(text, "DCGM_FI_DEV_DEC_UTIL")) == 16  # H100s decode too (7 NVDEC)


def test_encoder_sessions_and_each_jobs_engines_on_a_shared_gpu(tmp_path: Path) -> None:
    # two half-GPU jobs share an L40S's GPU 0; "enc" was given the video capability
    f = Fleet(tmp_path)
    f.sims = {n: SimulatedGpus(lookup("L40S"), 8, n, start=T0) for n in f.sims}  # 3 NVENC
    f.submit("enc", spec("enc", milli=500, user="alice"), T0 + 1)
    f.submit("train", spec("train", milli=500, user="bob"), T0 + 1)
    f.heartbeat(T0 + 2, video=frozenset({"enc"}))
    text = f.text()
    node = {lb["Hostname"] for lb, _ in series(text, "gpufleet_job_gpu_utilization_percent")}
    (host,) = node
    shared = {
        (lb["hpc_job"], lb["engine"]): v
        for lb, v in series(text, "gpufleet_job_gpu_utilization_percent")
        if lb["gpu"] == "0"
    }
    # each job's own share, not the GPU's total: the encoder is the encoding job's alone
    assert shared[("enc", "sm")] == shared[("train", "sm")] == 50.0
    assert shared[("enc", "encoder")] > 0 and shared[("train", "encoder")] == 0.0
    assert shared[("enc", "decoder")] > shared[("train", "decoder")] > 0
    sessions = {
        (lb["Hostname"], lb["gpu"]): v for lb, v in series(text, "gpufleet_gpu_encoder_sessions")
    }
    assert sessions[(host, "0")] == 1 and sum(sessions.values()) == 1  # one, on the shared GPU
    assert len(sessions) == 8 * len(f.sims)  # every L40S says its count, 0 included
    fps = {(lb["Hostname"], lb["gpu"]): v for lb, v in series(text, "gpufleet_gpu_encoder_fps")}
    assert fps[(host, "0")] > 0 and fps[(host, "1")] == 0


def test_no_encoder_series_for_a_gpu_without_nvenc(fleet: Fleet) -> None:
    fleet.heartbeat(T0 + 4, video=frozenset(fleet.ctrl.running))  # H100s: NVDEC, no NVENC
    text = fleet.text()
    for name in ENCODER_METRICS:
        assert series(text, name) == [], name
    use = series(fleet.text(), "gpufleet_job_gpu_utilization_percent")
    assert use and {lb["engine"] for lb, _ in use} == {"sm", "memory", "decoder"}


def test_a_field_the_agent_leaves_out_is_not_emitted_for_that_gpu(fleet: Fleet) -> None:
    """A real GPU without DCGM sends no profiling fields: no series, never a zero."""
    g = fleet.svc.links["n01"].metrics["gpus"][3]
    for k in [k for k in g["values"] if k.startswith("DCGM_FI_PROF_")]:
        del g["values"][k]
    rows = series(fleet.text(), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    assert len(rows) == 15
    assert ("n01", "3") not in {(lb["Hostname"], lb["gpu"]) for lb, _ in rows}


def test_a_scrape_per_node_serves_that_nodes_gpus_and_the_rest_apart(fleet: Fleet) -> None:
    whole = fleet.text()
    n00 = fleet.coll.render("n00").decode()
    rest = fleet.coll.render(gpus=False).decode()
    for text, hosts in ((whole, {"n00", "n01"}), (n00, {"n00"}), (rest, set())):
        got = {lb["Hostname"] for lb, _ in series(text, "DCGM_FI_DEV_GPU_TEMP")}
        assert got == hosts
    assert {lb["Hostname"] for lb, _ in series(n00, "gpufleet_gpu_healthy")} == {"n00"}
    assert "gpufleet_nodes" not in n00 and "gpufleet_host_" not in n00  # GPU series only
    assert "gpufleet_nodes" in rest and "gpufleet_gpu_healthy" not in rest
    # the per-node scrapes and the rest add up to the whole, sample for sample
    n01 = fleet.coll.render("n01").decode()

    def samples(t: str) -> list[str]:
        return sorted(ln for ln in t.splitlines() if ln and not ln.startswith("#"))

    def stable(lines: list[str]) -> list[str]:
        return [ln for ln in lines if not ln.startswith("gpufleet_metrics_render_seconds")]

    assert stable(samples(whole)) == stable(sorted(samples(n00) + samples(n01) + samples(rest)))
    with pytest.raises(KeyError):
        fleet.coll.render("nobody")
    fleet.ctrl.handle(T0 + 4, NodeLost("n01"), schedule=False)
    assert fleet.coll.render("n01") == b""  # a lost node shows no GPU series
