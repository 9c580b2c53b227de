"""``gpufleet validate``: layered acceptance of a running cluster; exit 1 on any FAIL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.io.specs import load_cluster
from gpufleet.model.errors import SpecError
from gpufleet.ops.validate import LAYERS, Settings, parse_layers
from gpufleet.ops.validate import report as rep
from gpufleet.ops.validate import validate as run_validation
from gpufleet.ops.validate.checks import Report

STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}
D = Settings()


def validate(
    layers: Annotated[
        str, typer.Option("--layers", help=f"comma-separated, of: {', '.join(LAYERS)}; or all")
    ] = "all",
    json_out: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    report_path: Annotated[
        Path | None, typer.Option("--report", help="Also write the report: .md, .html or .json.")
    ] = None,
    cluster: Annotated[
        Path | None,
        typer.Option("--cluster", help="Cluster spec YAML: the GPUs each node should have."),
    ] = None,
    shared: Annotated[str, typer.Option("--shared", help="A path every node must share.")] = "",
    storage_path: Annotated[
        str,
        typer.Option(
            "--storage-path",
            help="Where to measure throughput (default: --shared, else the job's directory).",
        ),
    ] = "",
    python: Annotated[
        str, typer.Option("--python", help="The Python on the nodes (stdlib is enough).")
    ] = D.python,
    probe_controller: Annotated[
        str,
        typer.Option(
            "--probe-controller",
            help="The controller's URL as the nodes reach it (default: --server).",
        ),
    ] = "",
    queue: Annotated[str, typer.Option("--queue", help="Queue for the probe jobs.")] = D.queue,
    net_mode: Annotated[
        str, typer.Option("--net-mode", help="ring, or pairs (every ordered pair).")
    ] = D.net_mode,
    net_mb: Annotated[
        int, typer.Option("--net-mb", help="MiB streamed per link (at most).")
    ] = D.net_mb,
    net_seconds: Annotated[
        float, typer.Option("--net-seconds", help="Seconds streamed per link (at most).")
    ] = D.net_seconds,
    min_net_gbps: Annotated[
        float, typer.Option("--min-net-gbps", help="Where the NIC speed is unknown.")
    ] = D.min_net_gbps,
    nic_fraction: Annotated[
        float, typer.Option("--nic-fraction", help="Share of a physical NIC's speed.")
    ] = D.nic_fraction,
    max_rtt_ms: Annotated[float, typer.Option("--max-rtt-ms")] = D.max_rtt_ms,
    min_busbw_gbs: Annotated[
        float, typer.Option("--min-busbw-gbs", help="NCCL all-reduce bus bandwidth.")
    ] = D.min_busbw_gbs,
    storage_mb: Annotated[int, typer.Option("--storage-mb")] = D.storage_mb,
    storage_seconds: Annotated[float, typer.Option("--storage-seconds")] = D.storage_seconds,
    min_write_mbps: Annotated[float, typer.Option("--min-write-mbps")] = D.min_write_mbps,
    min_read_mbps: Annotated[float, typer.Option("--min-read-mbps")] = D.min_read_mbps,
    min_iops: Annotated[float, typer.Option("--min-iops")] = D.min_iops,
    max_skew_ms: Annotated[float, typer.Option("--max-skew-ms")] = D.max_skew_ms,
    dcgm_level: Annotated[
        int, typer.Option("--dcgm-level", help="dcgmi diag -r N; 0 skips it.")
    ] = D.dcgm_level,
    max_heartbeat_age_s: Annotated[
        float, typer.Option("--max-heartbeat-age-s")
    ] = D.max_heartbeat_age_s,
    app: Annotated[
        str, typer.Option("--app", help="Sample job: auto (DDP where PyTorch is), ddp or hello.")
    ] = D.app,
    start_timeout_s: Annotated[
        float, typer.Option("--start-timeout-s", help="Cancel a probe job pending longer.")
    ] = D.start_timeout_s,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Check a running cluster layer by layer, the way the seeds' 上线验证 list does: devices,
    network, storage, clocks, scheduling, a sample distributed job, monitoring. Everything goes
    through the API and probe jobs the scheduler places on the nodes. Exits 1 on any FAIL."""
    try:
        chosen = parse_layers(layers)
    except ValueError as e:
        out.fail(str(e), code=2)
    if app not in ("auto", "ddp", "hello"):
        out.fail(f"--app {app!r}: use auto, ddp or hello", code=2)
    if net_mode not in ("ring", "pairs"):
        out.fail(f"--net-mode {net_mode!r}: use ring or pairs", code=2)
    spec = None
    if cluster is not None:
        try:
            spec = load_cluster(cluster)
        except SpecError as e:
            out.fail(str(e), "fix the cluster spec", code=2)
    settings = Settings(
        python=python,
        probe_controller=probe_controller,
        queue=queue,
        start_timeout_s=start_timeout_s,
        cluster=spec,
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
