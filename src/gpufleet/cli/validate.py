"""``gpufleet validate``: layered acceptance of a running cluster; exit 1 on any FAIL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.io.specs import load_cluster
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.ops.validate import LAYERS, Settings, parse_layers
from gpufleet.ops.validate import report as rep
from gpufleet.ops.validate import validate as run_validation
from gpufleet.ops.validate.checks import Report

STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}
D = Settings()


# the options, each a type of its own (so that the command's signature reads as a list)
LayersOpt = Annotated[
    str, typer.Option("--layers", help=f"comma-separated, of: {', '.join(LAYERS)}; or all")
]
JsonOutOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
ReportPathOpt = Annotated[
    Path | None, typer.Option("--report", help="Also write the report: .md, .html or .json.")
]
ClusterOpt = Annotated[
    Path | None,
    typer.Option("--cluster", help="Cluster spec YAML: the GPUs each node should have."),
]
SharedOpt = Annotated[str, typer.Option("--shared", help="A path every node must share.")]
StoragePathOpt = Annotated[
    str,
    typer.Option(
        "--storage-path",
        help="Where to measure throughput (default: --shared, else the job's directory).",
    ),
]
PythonOpt = Annotated[
    str, typer.Option("--python", help="The Python on the nodes (stdlib is enough).")
]
ProbeControllerOpt = Annotated[
    str,
    typer.Option(
        "--probe-controller",
        help="The controller's URL as the nodes reach it (default: --server).",
    ),
]
QueueOpt = Annotated[str, typer.Option("--queue", help="Queue for the probe jobs.")]
NetModeOpt = Annotated[str, typer.Option("--net-mode", help="ring, or pairs (every ordered pair).")]
NetMbOpt = Annotated[int, typer.Option("--net-mb", help="MiB streamed per link (at most).")]
NetSecondsOpt = Annotated[
    float, typer.Option("--net-seconds", help="Seconds streamed per link (at most).")
]
MinNetGbpsOpt = Annotated[
    float, typer.Option("--min-net-gbps", help="Where the NIC speed is unknown.")
]
NicFractionOpt = Annotated[
    float, typer.Option("--nic-fraction", help="Share of a physical NIC's speed.")
]
MaxRttMsOpt = Annotated[float, typer.Option("--max-rtt-ms")]
MinBusbwGbsOpt = Annotated[
    float, typer.Option("--min-busbw-gbs", help="NCCL all-reduce bus bandwidth.")
]
StorageMbOpt = Annotated[int, typer.Option("--storage-mb")]
StorageSecondsOpt = Annotated[float, typer.Option("--storage-seconds")]
MinWriteMbpsOpt = Annotated[float, typer.Option("--min-write-mbps")]
MinReadMbpsOpt = Annotated[float, typer.Option("--min-read-mbps")]
MinIopsOpt = Annotated[float, typer.Option("--min-iops")]
MaxSkewMsOpt = Annotated[float, typer.Option("--max-skew-ms")]
DcgmLevelOpt = Annotated[int, typer.Option("--dcgm-level", help="dcgmi diag -r N; 0 skips it.")]
MaxHeartbeatAgeSOpt = Annotated[float, typer.Option("--max-heartbeat-age-s")]
AppOpt = Annotated[
    str, typer.Option("--app", help="Sample job: auto (DDP where PyTorch is), ddp or hello.")
]
StartTimeoutSOpt = Annotated[
    float, typer.Option("--start-timeout-s", help="Cancel a probe job pending longer.")
]


def validate(
    layers: LayersOpt = "all",
    json_out: JsonOutOpt = False,
    report_path: ReportPathOpt = None,
    cluster: ClusterOpt = None,
    shared: SharedOpt = "",
    storage_path: StoragePathOpt = "",
    python: PythonOpt = D.python,
    probe_controller: ProbeControllerOpt = "",
    queue: QueueOpt = D.queue,
    net_mode: NetModeOpt = D.net_mode,
    net_mb: NetMbOpt = D.net_mb,
    net_seconds: NetSecondsOpt = D.net_seconds,
    min_net_gbps: MinNetGbpsOpt = D.min_net_gbps,
    nic_fraction: NicFractionOpt = D.nic_fraction,
    max_rtt_ms: MaxRttMsOpt = D.max_rtt_ms,
    min_busbw_gbs: MinBusbwGbsOpt = D.min_busbw_gbs,
    storage_mb: StorageMbOpt = D.storage_mb,
    storage_seconds: StorageSecondsOpt = D.storage_seconds,
    min_write_mbps: MinWriteMbpsOpt = D.min_write_mbps,
    min_read_mbps: MinReadMbpsOpt = D.min_read_mbps,
    min_iops: MinIopsOpt = D.min_iops,
    max_skew_ms: MaxSkewMsOpt = D.max_skew_ms,
    dcgm_level: DcgmLevelOpt = D.dcgm_level,
    max_heartbeat_age_s: MaxHeartbeatAgeSOpt = D.max_heartbeat_age_s,
    app: AppOpt = D.app,
    start_timeout_s: StartTimeoutSOpt = D.start_timeout_s,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Check a running cluster layer by layer, the way the seeds' 上线验证 list does: devices,
    network, storage, clocks, scheduling, a sample distributed job, monitoring. Everything goes
    through the API and probe jobs the scheduler places on the nodes. Exits 1 on any FAIL."""
    chosen = _layers(layers, app, net_mode)
    settings = Settings(
        python=python,
        probe_controller=probe_controller,
        queue=queue,
        start_timeout_s=start_timeout_s,
        cluster=_cluster_spec(cluster),
        dcgm_level=dcgm_level,
        net_mode=net_mode,
        net_mb=net_mb,
        net_seconds=net_seconds,
        nic_fraction=nic_fraction,
        min_net_gbps=min_net_gbps,
        max_rtt_ms=max_rtt_ms,
        min_busbw_gbs=min_busbw_gbs,
        shared=shared,
        storage_path=storage_path,
        storage_mb=storage_mb,
        storage_seconds=storage_seconds,
        min_write_mbps=min_write_mbps,
        min_read_mbps=min_read_mbps,
        min_iops=min_iops,
        max_skew_ms=max_skew_ms,
        max_heartbeat_age_s=max_heartbeat_age_s,
        app=app,
    )
    with connect(server, token) as c:
        result = run_validation(c, settings, chosen, log=out.note)
    _report(result, report_path, json_out)


def _layers(layers: str, app: str, net_mode: str) -> list[str]:
    """The layers asked for, once the choices are known good (else exit 2)."""
    try:
        chosen = parse_layers(layers)
    except ValueError as e:
        out.fail(str(e), code=2)
    if app not in ("auto", "ddp", "hello"):
        out.fail(f"--app {app!r}: use auto, ddp or hello", code=2)
    if net_mode not in ("ring", "pairs"):
        out.fail(f"--net-mode {net_mode!r}: use ring or pairs", code=2)
    return chosen


def _cluster_spec(cluster: Path | None) -> ClusterSpec | None:
    if cluster is None:
        return None
    try:
        return load_cluster(cluster)
    except SpecError as e:
        out.fail(str(e), "fix the cluster spec", code=2)


def _report(result: Report, report_path: Path | None, json_out: bool) -> None:
    """The report written (if asked), shown (a table, or JSON); exit 1 on any FAIL."""
    if report_path is not None:
        try:
            rep.write(result, report_path)
        except OSError as e:
            out.fail(f"cannot write {report_path}: {e.strerror}")
        out.note(f"wrote {report_path}")
    if json_out:
        out.emit_json(result.to_dict())
    else:
        show(result)
    if not result.ok:
        raise typer.Exit(1)


def show(result: Report) -> None:
    out.table(
        ["STATUS", "LAYER", "CHECK", "TARGET", "MEASURED", "EXPECTED", "DETAIL"],
        [
            [
                Text(c.status.value, style=STYLE[c.status.value]),
                c.layer,
                c.name,
                c.target,
                c.measured,
                c.expected,
                c.detail,
            ]
            for c in result.checks
        ],
        empty="no checks ran",
    )
    style = "bold green" if result.ok else "bold red"
    out.stdout().print(Text(rep.summary_line(result), style=style))
