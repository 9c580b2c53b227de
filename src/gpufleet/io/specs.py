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
    """A YAML list of queues (``name, weight, cohort, quota``), or a mapping with ``queues:``.

    The one reader of a queues file (the server's ``--queues`` and the simulator's): it refuses
    an empty list and duplicate names, and reports every bad entry and duplicate at once, so
    a long file is fixed in one edit."""
    source = str(path)
    data = load_yaml(path)
    prefix = ""
    if isinstance(data, dict) and "queues" in data:
        data, prefix = data["queues"], "queues"
    if not isinstance(data, list) or not data:
        raise SpecError(
            "expected a non-empty list of queues (or a mapping with 'queues')",
            source=source,
            field=prefix,
        )
    queues: list[QueueSpec] = []
    problems: list[SpecError] = []
    first_at: dict[str, str] = {}
    for i, item in enumerate(data):
        at = f"{prefix}[{i}]"
        try:
            queue = QueueSpec.from_dict(item, source=source, path=at)
        except SpecError as e:
            problems.append(e)
            continue
        if queue.name in first_at:
            message = f"duplicate queue name {queue.name!r} (first at {first_at[queue.name]})"
            problems.append(SpecError(message, source=source, field=at))
            continue
        first_at[queue.name] = at
        queues.append(queue)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        listed = "; ".join(f"{e.field}: {e.reason}" if e.field else e.reason for e in problems)
        raise SpecError(f"{len(problems)} problems: {listed}", source=source, field=prefix)
    return tuple(queues)


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
