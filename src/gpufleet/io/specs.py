"""Load cluster and job specs from YAML files, with errors that name the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.model.queue import QueueSpec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_yaml(path: str | Path) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", source=str(p)) from None
    except OSError as e:
        raise SpecError(f"cannot read: {e.strerror}", source=str(p)) from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"not valid YAML: {e.problem}", source=str(p), field=where) from None
    except yaml.YAMLError as e:
        raise SpecError(f"not valid YAML: {e}", source=str(p)) from None


def load_cluster(path: str | Path) -> ClusterSpec:
    return ClusterSpec.from_dict(load_yaml(path), source=str(path))


def load_queues(path: str | Path) -> tuple[QueueSpec, ...]:
    data = load_yaml(path)
    if isinstance(data, dict) and "queues" in data:
        data = data["queues"]
    if not isinstance(data, list):
        raise SpecError("expected a list of queues (or a mapping with 'queues')", source=str(path))
    return tuple(
        QueueSpec.from_dict(q, source=str(path), path=f"queues[{i}]") for i, q in enumerate(data)
    )


def load_jobs(path: str | Path) -> list[JobSpec]:
    """One job (a mapping) or many (a list, or a mapping with 'jobs')."""
    data = load_yaml(path)
    if isinstance(data, dict) and "jobs" in data:
        data = data["jobs"]
    items = data if isinstance(data, list) else [data]
    return [
        JobSpec.from_dict(j, source=str(path), path=f"jobs[{i}]" if len(items) > 1 else "")
        for i, j in enumerate(items)
    ]


def example(name: str) -> Path:
    return EXAMPLES / name
