"""Loaders for Alibaba's openb traces (the FGD paper's ``data/csv``): node lists and pod lists.

Node list columns: ``sn,cpu_milli,memory_mib,gpu,model``. Pod list columns: ``name,cpu_milli,
memory_mib,num_gpu,gpu_milli`` and, optionally, ``gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time`` (the multigpu files lack them). The pod rows are converted as the
simulator's ``pod_csv_to_yaml.py`` does: a pod with ``num_gpu == 0`` is CPU-only (its GPU columns
are ignored); otherwise ``gpu_milli`` is clipped to at most 1000 and ``gpu_spec`` is split on
``|`` into the allowed models. The timing columns are read for validation only and dropped.

A malformed row raises :class:`SpecError` with ``source`` = the file and ``field`` =
``"line N: column"``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path

from gpufleet.model.cluster import DEFAULT_LEAF, DEFAULT_POD, ClusterSpec, NodeSpec
from gpufleet.model.errors import SpecError
from gpufleet.scheduler.openb_scores import MILLI, PodRequest

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
MAX_GPUS_PER_NODE = 64


def _rows(
    path: Path, required: Sequence[str], optional: Sequence[str] = ()
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for each data row, after checking the header."""
    source = str(path)
    try:
        fh = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read the file: {exc.strerror or exc}", source=source) from exc
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise SpecError("the file is empty (no header row)", source=source) from None
        header = [h.strip() for h in header]
        known = set(required) | set(optional)
        unknown = [h for h in header if h not in known]
        if unknown:
            raise SpecError(
                f"unknown column(s) {', '.join(map(repr, unknown))}; expected "
                f"{', '.join(required)}"
                + (f" and optionally {', '.join(optional)}" if optional else ""),
                source=source,
                field="line 1",
            )
        missing = [c for c in required if c not in header]
        if missing:
            raise SpecError(
                f"missing column(s) {', '.join(missing)}", source=source, field="line 1"
            )
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise SpecError(
                f"duplicate column(s) {', '.join(dupes)}", source=source, field="line 1"
            )
        for values in reader:
            line = reader.line_num
            if not values or all(not v.strip() for v in values):
                continue  # blank line
            if len(values) != len(header):
                raise SpecError(
                    f"expected {len(header)} fields, got {len(values)}",
                    source=source,
                    field=f"line {line}",
                )
            yield line, {h: v.strip() for h, v in zip(header, values, strict=True)}


def _int(
    row: dict[str, str],
    column: str,
    *,
    source: str,
    line: int,
    minimum: int = 0,
    maximum: int | None = None,
) -> int:
    raw = row.get(column, "")
    where = f"line {line}: {column}"
    if raw == "":
        raise SpecError("is empty; an integer is required", source=source, field=where)
    try:
        value = int(raw)
    except ValueError:
        raise SpecError(f"must be an integer, got {raw!r}", source=source, field=where) from None
    if value < minimum:
        raise SpecError(f"must be at least {minimum}, got {value}", source=source, field=where)
    if maximum is not None and value > maximum:
        raise SpecError(f"must be at most {maximum}, got {value}", source=source, field=where)
    return value


def load_nodes(path: str | Path) -> list[NodeSpec]:
    """The node list as NodeSpecs, in file order; all in leaf-0 of pod-0.

    ``gpu_model`` is the trace's own model string (e.g. "G2", "V100M16").
    """
    p = Path(path)
    source = str(p)
    nodes: list[NodeSpec] = []
    seen: dict[str, int] = {}
    for line, row in _rows(p, NODE_COLUMNS):
        name = row["sn"]
        if not name:
            raise SpecError(
                "is empty; a node name is required", source=source, field=f"line {line}: sn"
            )
        if name in seen:
            raise SpecError(
                f"node {name!r} is already on line {seen[name]}",
                source=source,
                field=f"line {line}: sn",
            )
        seen[name] = line
        cpu = _int(row, "cpu_milli", source=source, line=line)
        mem = _int(row, "memory_mib", source=source, line=line)
        gpus = _int(row, "gpu", source=source, line=line, maximum=MAX_GPUS_PER_NODE)
        model = row["model"]
        if gpus and not model:
            raise SpecError(
                f"is empty, but the node has {gpus} GPU(s)",
                source=source,
                field=f"line {line}: model",
            )
        nodes.append(NodeSpec(name, model, gpus, cpu, mem, DEFAULT_LEAF, DEFAULT_POD))
    if not nodes:
        raise SpecError("the node list has no nodes", source=source)
    return nodes


def load_cluster(path: str | Path, name: str | None = None) -> ClusterSpec:
    """The node list as a ClusterSpec (named after the file unless ``name`` is given)."""
    p = Path(path)
    spec = ClusterSpec.build(name or p.stem, load_nodes(p))
    return ClusterSpec(spec.name, spec.nodes, spec.leaves, spec.queues, str(p))


def load_pods(path: str | Path) -> list[PodRequest]:
    """The pod list as PodRequests, in file order."""
    p = Path(path)
    source = str(p)
    pods: list[PodRequest] = []
    seen: dict[str, int] = {}
    for line, row in _rows(p, POD_REQUIRED, POD_OPTIONAL):
        name = row["name"]
        if not name:
            raise SpecError(
                "is empty; a pod name is required", source=source, field=f"line {line}: name"
            )
        if name in seen:
            raise SpecError(
                f"pod {name!r} is already on line {seen[name]}",
                source=source,
                field=f"line {line}: name",
            )
        seen[name] = line
        cpu = _int(row, "cpu_milli", source=source, line=line)
        mem = _int(row, "memory_mib", source=source, line=line)
        num = _int(row, "num_gpu", source=source, line=line, maximum=MAX_GPUS_PER_NODE)
        for col in ("creation_time", "deletion_time", "scheduled_time"):
            if row.get(col):
                _int(row, col, source=source, line=line)
        if num == 0:
            pods.append(PodRequest(cpu, mem, name=name))
            continue
        milli = _int(row, "gpu_milli", source=source, line=line, minimum=-(2**62))
        if milli <= 0:
            raise SpecError(
                f"must be positive for a pod with num_gpu={num}, got {milli}",
                source=source,
                field=f"line {line}: gpu_milli",
            )
        milli = min(milli, MILLI)
        if num > 1 and milli < MILLI:
            raise SpecError(
                f"a pod with num_gpu={num} must ask for whole GPUs (1000), got {milli}",
                source=source,
                field=f"line {line}: gpu_milli",
            )
        spec = row.get("gpu_spec", "")
        models: tuple[str, ...] = ()
        if spec:
            models = tuple(m.strip() for m in spec.split("|"))
            if any(not m for m in models):
                raise SpecError(
                    f"has an empty model name in {spec!r}",
                    source=source,
                    field=f"line {line}: gpu_spec",
                )
        pods.append(PodRequest(cpu, mem, num, milli, models, name))
    if not pods:
        raise SpecError("the pod list has no pods", source=source)
    return pods
