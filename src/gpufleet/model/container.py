"""A job's container: the image its tasks run in, the host paths bind-mounted into it and the
directory they start in (pyxis's --container-image, --container-mounts, --container-workdir).

The node's runtime (apptainer, enroot, podman, docker) runs it; the task's environment, user,
GPUs, logs and limits are the same as a bare task's. A path goes onto a runtime's command line
(``-v SRC:DST``, ``--mount type=bind,source=…``, ``--bind SRC:DST``), so one with ``:`` or
``,`` in it could not be said there and is refused; an image starting with ``-`` would read as
an option.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from gpufleet.model.errors import SpecError
from gpufleet.model.validate import MAX_TEXT, Fields, control_problem, text_problem

MAX_IMAGE = 1024  # characters of an image reference (a registry name, a path, docker://…)
MAX_PATH = MAX_TEXT  # a mount's source or target, the workdir
MAX_MOUNTS = 64
_PATH_FORBIDDEN = (":", ",")  # the separators of the runtimes' mount options


@dataclass(frozen=True, slots=True)
class Mount:
    source: str  # on the node
    target: str  # in the container
    read_only: bool = False

    def pyxis(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "read_only": self.read_only}


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    image: str
    mounts: tuple[Mount, ...] = ()
    workdir: str = ""  # "" : the image's own

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "mounts": [m.to_dict() for m in self.mounts],
            "workdir": self.workdir,
        }


def container_from_dict(d: dict[str, Any]) -> ContainerSpec:
    """The store's shape (``ContainerSpec.to_dict``) back; KeyError/TypeError when it is not."""
    mounts = tuple(
        Mount(str(m["source"]), str(m["target"]), bool(m.get("read_only", False)))
        for m in d.get("mounts") or []
    )
    return ContainerSpec(str(d["image"]), mounts, str(d.get("workdir") or ""))


def path_problem(value: Any, max_len: int = MAX_PATH) -> str | None:
    """What makes ``value`` unfit as a path of a container (absolute, no ':' or ','), or None."""
    if not isinstance(value, str) or not value:
        return f"must be a non-empty string, got {value!r}"[:300]
    problem = text_problem(value, max_len) or control_problem(value)
    if problem:
        return problem
    if not value.startswith("/"):
        return f"must be an absolute path, got {value[:200]!r}"
    bad = [c for c in _PATH_FORBIDDEN if c in value]
    if bad:
        return f"must not contain {' or '.join(repr(c) for c in bad)}, got {value[:200]!r}"
    return None


def image_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return f"must be a non-empty string, got {value!r}"[:300]
    problem = text_problem(value, MAX_IMAGE) or control_problem(value)
    if problem:
        return problem
    if value.startswith("-"):
        return f"must not start with '-', got {value[:200]!r}"
    if any(c.isspace() for c in value):
        return f"must not contain white space, got {value[:200]!r}"
    return None


def read_container(f: Fields, key: str = "container") -> ContainerSpec | None:
    """The ``container`` key of a spec (None when absent), every problem of it at once."""
    raw = f.raw(key)
    if raw is None:
        return None
    where = f.field(key)
    if isinstance(raw, str):
        raw = {"image": raw}  # the image alone
    if not isinstance(raw, dict):
        raise SpecError(
            f"must be a mapping or an image name, got {type(raw).__name__}",
            source=f.source,
            field=where,
        )
    problems: list[tuple[str, str]] = []
    unknown = sorted(str(k) for k in raw if k not in ("image", "mounts", "workdir"))
    for k in unknown:
        problems.append((k, "unknown key (allowed: image, mounts, workdir)"))
    image = raw.get("image")
    if image is None:
        problems.append(("image", "is required"))
    elif (p := image_problem(image)) is not None:
        problems.append(("image", p))
    workdir = raw.get("workdir") or ""
    if workdir and (p := path_problem(workdir)) is not None:
        problems.append(("workdir", p))
    mounts: list[Mount] = []
    raw_mounts = raw.get("mounts") or []
    if isinstance(raw_mounts, str):
        try:
            raw_mounts = [m.to_dict() for m in parse_mounts(raw_mounts)]
        except ValueError as e:
            problems.append(("mounts", str(e)))
            raw_mounts = []
    if not isinstance(raw_mounts, list):
        problems.append(("mounts", f"must be a list, got {type(raw_mounts).__name__}"))
    elif len(raw_mounts) > MAX_MOUNTS:
        problems.append(("mounts", f"must have at most {MAX_MOUNTS} mounts, got {len(raw_mounts)}"))
    else:
        for i, m in enumerate(raw_mounts):
            at = f"mounts[{i}]"
            if not isinstance(m, dict):
                problems.append((at, f"must be a mapping, got {type(m).__name__}"))
                continue
            for k in sorted(str(k) for k in m if k not in ("source", "target", "read_only")):
                problems.append((f"{at}.{k}", "unknown key (allowed: read_only, source, target)"))
            bad = False
            for k in ("source", "target"):
                if m.get(k) is None:
                    problems.append((f"{at}.{k}", "is required"))
                    bad = True
                elif (p := path_problem(m[k])) is not None:
                    problems.append((f"{at}.{k}", p))
                    bad = True
            ro = m.get("read_only", False)
            if ro is None:
                ro = False
            if not isinstance(ro, bool):
                problems.append((f"{at}.read_only", f"must be true or false, got {ro!r}"[:300]))
                bad = True
            if not bad:
                mounts.append(Mount(m["source"], posixpath.normpath(m["target"]), ro))
        targets = [m.target for m in mounts]
        for t in sorted({t for t in targets if targets.count(t) > 1}):
            problems.append(("mounts", f"two mounts on the same target {t!r}"))
    if problems:
        if len(problems) == 1:
            k, msg = problems[0]
            raise SpecError(msg, source=f.source, field=f"{where}.{k}")
        said = "; ".join(f"{where}.{k}: {msg}" for k, msg in problems)
        raise SpecError(f"{len(problems)} problems: {said}", source=f.source, field=where)
    assert isinstance(image, str)
    return ContainerSpec(
        image.strip(), tuple(mounts), posixpath.normpath(workdir) if workdir else ""
    )


def parse_mounts(text: str) -> tuple[Mount, ...]:
    """pyxis's ``--container-mounts``: ``SRC:DST[:FLAGS]`` separated by ','; ``SRC`` alone
    mounts it at the same path; FLAGS ``ro`` or ``rw`` (``ro`` wins). ValueError says which."""
    out = []
    for i, item in enumerate(p for p in text.split(",")):
        item = item.strip()
        if not item:
            raise ValueError(f"mount {i + 1} is empty (expected SRC[:DST[:FLAGS]])")
        parts = item.split(":")
        if len(parts) > 3:
            raise ValueError(f"{item!r}: expected SRC[:DST[:FLAGS]]")
        src = parts[0]
        dst = parts[1] if len(parts) > 1 and parts[1] else src
        flags = parts[2].split("+") if len(parts) == 3 else []
        for flag in flags:
            if flag not in ("ro", "rw", ""):
                raise ValueError(f"{item!r}: unknown mount flag {flag!r} (ro or rw)")
        out.append(Mount(src, dst, "ro" in flags))
    return tuple(out)
