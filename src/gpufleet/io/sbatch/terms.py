"""The terms of a job other than its resources, from a :class:`SlurmRequest`: the nodes it may
run on (``-w``, ``-x``, ``-C``, ``--exclusive``, ``--reservation``), its priority, its warning
signal, its container (pyxis's options) and its dependencies, each refused with its line where
gpufleet cannot run it."""

from __future__ import annotations

from typing import Any

from gpufleet.io import slurm_values as v
from gpufleet.io.sbatch.request import CANNOT, Build
from gpufleet.model import hostlist
from gpufleet.model.errors import SpecError
from gpufleet.model.limits import MAX_NODE_NAMES, SPEC_BOUNDS
from gpufleet.model.validate import Fields


def nodes_terms(b: Build) -> dict[str, Any]:
    """-w, -x, -C and --exclusive as the spec's nodelist, exclude, constraint, exclusive."""
    r = b.req
    out: dict[str, Any] = {}
    for key in ("nodelist", "exclude"):
        text = getattr(r, key)
        if text and "/" in text:
            raise b.err(
                f"{CANNOT}{b.text(key)}: a file of node names (Slurm reads a name with / "
                "as one); give the names",
                key,
            )
        if text:
            try:
                names = hostlist.expand(text, max_hosts=MAX_NODE_NAMES)
            except ValueError as e:
                raise b.err(f"{b.text(key)}: {e}", key) from None
            out[key] = list(dict.fromkeys(names))
    if r.constraint:
        from gpufleet.model.constraint import parse as parse_constraint  # rare: lazily

        try:
            out["constraint"] = parse_constraint(r.constraint).text()
        except ValueError as e:
            raise b.err(f"{CANNOT}{b.text('constraint')}: {e}", "constraint") from None
    if r.reservation and r.reservation.strip():
        out["reservation"] = r.reservation.strip()  # checked at submit: it exists, is the user's
    if r.exclusive == "exclusive":
        out["exclusive"] = True
    elif r.exclusive is not None:
        b.note(
            "exclusive",
            f"{b.text('exclusive')} has no effect here: only whole-node --exclusive is "
            "honoured (gpufleet has no user/MCS/topology sharing rules)",
        )
    return out


def priority(b: Build) -> int | None:
    r = b.req
    out: int | None = None
    if isinstance(r.priority, int):
        out = r.priority
    elif r.priority is not None:
        b.note("priority", f"{b.text('priority')} has no effect here")
    if r.nice is not None:
        out = (out or 0) - r.nice
    return out


def container(b: Build) -> dict[str, Any] | None:
    """pyxis's --container-image, --container-mounts and --container-workdir as the spec's
    ``container``, checked here so that a problem names its line."""
    r = b.req
    names = ("container-image", "container-mounts", "container-workdir")
    if r.container_image is None:
        given = [n for n in names[1:] if n in b.seen]
        if given:
            raise b.err(f"{b.text(given[0])} needs --container-image", *given)
        return None
    c = {
        "image": r.container_image,
        "mounts": r.container_mounts or None,
        "workdir": r.container_workdir or None,
    }
    from gpufleet.model.container import read_container  # rare: lazily

    try:
        read_container(Fields({"container": c}, source=b.source, path=""))
    except SpecError as e:
        raise b.err(f"{e.field}: {e.reason}", *names) from None
    return c


def signal(b: Build) -> dict[str, Any] | None:
    """--signal=[B:]SIG[@T] as the spec's ``signal``: T seconds before the time limit, and at a
    preemption (as Slurm's send_user_signal), then up to T to checkpoint (model/notice.py)."""
    w = b.req.signal
    if w is None:
        return None
    lo, hi = SPEC_BOUNDS["signal.signal"]
    if w.reservation:
        raise b.err(
            f"{CANNOT}{b.text('signal')}: R: (at the end of a reservation): gpufleet does "
            "not signal a job when its reservation ends",
            "signal",
        )
    if not lo <= w.number <= hi:
        raise b.err(
            f"{CANNOT}{b.text('signal')}: signal {w.number} is not one a Linux node can "
            f"send ({lo} to {hi})",
            "signal",
        )
    if b.req.time_limit is None or b.req.time_limit == v.UNLIMITED:
        b.note(
            "signal",
            f"{b.text('signal')} is sent only at a preemption without a time limit (--time)",
        )
    return {"signal": w.number, "before_s": w.seconds, "batch_only": w.batch_only}


def dependencies(b: Build) -> tuple[tuple[str, str], ...]:
    r = b.req
    if r.dependency is None:
        return ()
    unsupported = sorted(
        {d.type for d in r.dependencies if d.type not in v.SUPPORTED_DEPENDENCY_TYPES or d.minutes}
    )
    if r.dependency_any or unsupported:
        what = "'?' (any of)" if r.dependency_any else ", ".join(unsupported)
        raise b.err(
            f"{CANNOT}{b.text('dependency')}: {what} is not supported "
            f"(gpufleet knows {' and '.join(v.SUPPORTED_DEPENDENCY_TYPES)}, every one must hold)",
            "dependency",
        )
    return tuple((d.type, d.job) for d in r.dependencies if d.job is not None)
