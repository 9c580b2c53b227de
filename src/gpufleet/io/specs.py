"""Load cluster and job specs from YAML files, with errors that name the file and field."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError, every
from gpufleet.model.every import every_problem, segments_of
from gpufleet.model.heal import HealPolicy
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
    loader = _UniqueKeys(text)
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"not valid YAML: {e.problem}", source=str(p), field=where) from None
    except yaml.YAMLError as e:
        raise SpecError(f"not valid YAML: {e}", source=str(p)) from None
    finally:
        loader.dispose()
    if loader.twice:  # one file, one meaning: PyYAML would keep the last silently
        raise every(
            [
                SpecError(
                    f"the key {key!r} is given twice in one mapping (first on line {first}); "
                    "give it once",
                    source=str(p),
                    field=f"line {line}, column {column}",
                )
                for key, first, line, column in loader.twice
            ]
        )
    return data


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader that notes each key given twice in one mapping (with where)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.twice: list[tuple[str, int, int, int]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, int] = {}
        for k, _ in node.value:
            if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                line = k.start_mark.line + 1
                if k.value in seen:
                    self.twice.append((k.value, seen[k.value], line, k.start_mark.column + 1))
                else:
                    seen[k.value] = line
        return super().construct_mapping(node, deep=deep)


def load_cluster(path: str | Path) -> ClusterSpec:
    """A cluster YAML; every problem at once, each with its line and column (SpecErrors)."""
    source = str(path)
    data = load_yaml(path)
    spec, problems = every_problem(lambda d: ClusterSpec.from_dict(d, source=source), data)
    if problems:
        places = marks(Path(path).read_text(encoding="utf-8"))
        found = [located(e, places, tuple(segments_of(e.field, ""))) for e in problems]
        raise every(sorted(found, key=_line))
    assert spec is not None
    return spec


def load_heal_policy(path: str | Path) -> HealPolicy:
    """A heal policy file (``--heal-policy``): the cluster YAML's ``heal:`` mapping at its top,
    or that mapping bare; every problem at once, each with its line and column."""
    source = str(path)
    data = load_yaml(path)
    if data is None:
        data = {}
    prefix = "heal" if isinstance(data, dict) and set(data) == {"heal"} else ""
    body = data["heal"] if prefix else data
    policy, problems = every_problem(
        lambda d: HealPolicy.from_dict(d, source=source, path=prefix), body, path=prefix
    )
    if problems:
        places = marks(Path(path).read_text(encoding="utf-8"))
        found = [located(e, places, tuple(segments_of(e.field, ""))) for e in problems]
        raise every(sorted(found, key=_line))
    assert policy is not None
    return policy


def located(e: SpecError, places: dict[Key, tuple[int, int]], key: Key) -> SpecError:
    """``e`` with its source's line and column: of the key at fault (``key``: where its
    field is in the document), else of the nearest key above it that the file has (a missing
    key: its mapping's)."""
    while key and key not in places:
        key = key[:-1]
    line, col = places.get(key, (0, 0))
    return SpecError(e.reason, source=f"{e.source}:{line}:{col}" if line else e.source,
                     field=e.field)  # fmt: skip


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


Key = tuple[str | int, ...]  # a place in a YAML document: ("jobs", 0, "topology", "level")


def marks(text: str) -> dict[Key, tuple[int, int]]:
    """Where each key (and each list item) of a YAML document starts: (line, column), from 1."""
    out: dict[Key, tuple[int, int]] = {}

    def walk(node: yaml.Node, at: Key) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = (*at, k.value)
                out[key] = (k.start_mark.line + 1, k.start_mark.column + 1)
                walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                out[(*at, i)] = (v.start_mark.line + 1, v.start_mark.column + 1)
                walk(v, (*at, i))

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return out
    if root is not None:
        walk(root, ())
    return out


@dataclass
class YamlJobs:
    """The jobs of a job YAML (one mapping, a list, or a mapping with ``jobs:``), and where
    each key is, so that a problem names its line and column."""

    source: str
    items: list[Any]
    prefix: Key  # where the items are: () for one job, ("jobs",) or () for a list
    many: bool
    places: dict[Key, tuple[int, int]] = field(default_factory=dict)

    def path(self, i: int) -> str:
        """The field prefix of job ``i``'s problems: ``jobs[1]`` in a file of many."""
        return f"jobs[{i}]" if self.many else ""

    def locate(self, i: int, e: SpecError) -> SpecError:
        """``e`` about job ``i``, its source with the line and column of the key at fault (of
        the nearest one there is: a missing key is its job's)."""
        at, name = self.path(i), e.field
        if at and not name.startswith(at):  # which job, in a file of many
            name = f"{at}.{name}" if name else at
        key = (*self.prefix, *([i] if self.many else []), *segments_of(e.field, at))
        found = located(SpecError(e.reason, source=self.source), self.places, key)
        return SpecError(e.reason, source=found.source, field=name)


def yaml_jobs(path: str | Path) -> YamlJobs:
    data = load_yaml(path)
    prefix: Key = ()
    if isinstance(data, dict) and "jobs" in data:
        data, prefix = data["jobs"], ("jobs",)
    items = data if isinstance(data, list) else [data]
    many = isinstance(data, list)
    try:
        places = marks(Path(path).read_text(encoding="utf-8"))
    except OSError:
        places = {}
    return YamlJobs(str(path), items, prefix, many, places)


def load_jobs(path: str | Path, *, user: str | None = None) -> list[JobSpec]:
    """One job (a mapping) or many (a list, or a mapping with 'jobs'); every problem of every
    job at once, each with its line and column (SpecErrors). ``user``: the owner of a job
    that names none (the submitter's, as the server fills it in)."""
    y = yaml_jobs(path)
    specs: list[JobSpec] = []
    problems: list[SpecError] = []
    for i, item in enumerate(y.items):
        data = {"user": user, **item} if user and isinstance(item, dict) else item
        spec, found = JobSpec.read_all(data, source=y.source, path=y.path(i))
        problems += [y.locate(i, e) for e in found]
        if spec is not None:
            specs.append(spec)
    if problems:
        raise every(sorted(problems, key=_line))
    return specs


def _line(e: SpecError) -> tuple[int, int]:
    parts = e.source.rsplit(":", 2)
    if (
        len(parts) == 3
        and (parts[1].isascii() and parts[1].isdigit())
        and (parts[2].isascii() and parts[2].isdigit())
    ):
        return int(parts[1]), int(parts[2])
    return (0, 0)


def example(name: str) -> Path:
    return EXAMPLES / name
