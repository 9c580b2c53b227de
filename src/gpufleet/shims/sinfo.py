"""``sinfo`` over gpufleet: every queue is a partition over its node set (every node where it has
none: ADR 0066), one line per partition and node state, in sinfo's formats."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from gpufleet.client.lean import rows as lean_rows
from gpufleet.io.slurm_style import format_rows
from gpufleet.model import replicas
from gpufleet.model.queue import in_node_set
from gpufleet.shims.common import Usage, connect, run
from gpufleet.shims.parser import Parser

DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"  # sinfo's own
NODE_FORMAT = "%#N %.6D %.#P %6t"  # sinfo -N (its partitions right-justified)
SUMMARY_FORMAT = "%#P %.5a %.10l %.16F %N"  # sinfo -s
DEFAULT_QUEUE = "default"  # where a job without a queue goes (model.job), sinfo's '*'
# gpufleet's node states → sinfo's compact and long names ('*': not responding)
STATES = {
    "idle": ("idle", "idle"),
    "mixed": ("mix", "mixed"),
    "allocated": ("alloc", "allocated"),
    "drained": ("drain", "drained"),
    "suspect": ("unk*", "unknown*"),
    "unhealthy": ("fail", "fail"),
    "lost": ("down*", "down*"),
    # an elastic pool's nodes, as Slurm's power saving shows them (~ off, # powering up,
    # % powering down; a node that failed to resume is DOWN+POWERED_DOWN)
    "powered_down": ("idle~", "idle~"),
    "powering_up": ("idle#", "idle#"),
    "powering_down": ("idle%", "idle%"),
    "power_failed": ("down~", "down~"),
    # in an open reservation (not gpufleet states: worked out by ``state``)
    "maint": ("maint", "maint"),
    "reserved": ("resv", "reserved"),
}
_IN_USE = ("idle", "mixed", "allocated")


def state(n: Any) -> str:
    """The node's state as sinfo shows it: ``maint`` in an open maintenance window, ``reserved``
    when idle in another open reservation (Slurm's), else gpufleet's; a node in use is
    ``allocated`` only when all its CPUs are (Slurm's: its GPUs all taken but CPUs left is
    ``mixed``, seen with Slurm 22.05)."""
    s = str(n["state"])
    if s in _IN_USE and "cpu_free" in n:
        used = n["cpu_free"] < n["cpu_cores"] or n["gpus_free"] < n["gpus"]
        s = "idle" if not used else "allocated" if n["cpu_free"] <= 0 else "mixed"
    if n.get("reservation") and s in _IN_USE:
        if n.get("maint"):
            return "maint"
        if s == "idle":
            return "reserved"
    return s


TITLES = {
    "P": "PARTITION", "a": "AVAIL", "l": "TIMELIMIT", "D": "NODES", "t": "STATE", "T": "STATE",
    "N": "NODELIST", "n": "HOSTNAMES", "c": "CPUS", "m": "MEMORY", "G": "GRES",
    "C": "CPUS(A/I/O/T)", "E": "REASON", "f": "AVAIL_FEATURES", "F": "NODES(A/I/O/T)",
    "%": "%",
}  # fmt: skip


def _compress(names: list[str]) -> str:
    from gpufleet.model.hostlist import compress  # only sinfo needs it

    return compress(sorted(names)) if names else ""


def _fields() -> dict[str, Callable[[Any], str]]:
    """Each row: (partition, default?, nodes of one state)."""

    def first(key: str) -> Callable[[Any], str]:
        return lambda r: str(r[2][0][key]) if r[2] else ""

    return {
        "P": lambda r: r[0] + ("*" if r[1] else ""),
        "a": lambda r: "up",
        "l": lambda r: "infinite",
        "D": lambda r: str(len(r[2])),
        "t": lambda r: STATES.get(state(r[2][0]), (state(r[2][0]), ""))[0],
        "T": lambda r: STATES.get(state(r[2][0]), ("", state(r[2][0])))[1],
        "N": lambda r: _compress([n["name"] for n in r[2]]),
        "n": lambda r: ",".join(n["name"] for n in r[2]),
        "c": lambda r: f"{min(n['cpu_cores'] for n in r[2]):g}",
        "m": lambda r: str(int(min(n["memory_gib"] for n in r[2]) * 1024)),
        "G": lambda r: _gres(r[2][0]),
        "C": lambda r: _cpus(r[2]),
        "F": lambda r: _counts(r[2]),
        "E": lambda r: first("why")(r) or "none",
        "f": lambda r: ",".join(r[2][0].get("features") or []) or "(null)",
        "%": lambda r: "%",
    }


def _gres(n: Any) -> str:
    """A node's GRES as Slurm prints it; GPUs time-sliced as replicas add Slurm's ``shard``
    (``gpu:l40s:2,shard:8``: 4 replicas of each of 2 GPUs; model/replicas.py)."""
    if not n["gpus"]:
        return "(null)"
    gres = f"gpu:{n.get('gres_type') or n['gpu_model']}:{n['gpus']}"
    per = replicas.of((n.get("labels") or {}).items())
    return f"{gres},shard:{n['gpus'] * per}" if per else gres


def _counts(nodes: list[Any]) -> str:
    """``%F``: nodes allocated (or mixed), idle, other (down, drained, …) and in all."""
    states = [state(n) for n in nodes]
    busy = sum(s in ("mixed", "allocated") for s in states)
    idle = states.count("idle")
    return f"{busy}/{idle}/{len(states) - busy - idle}/{len(states)}"


def _cpus(nodes: list[Any]) -> str:
    total = sum(n["cpu_cores"] for n in nodes)
    idle = sum(n["cpu_free"] for n in nodes)
    return f"{total - idle:g}/{idle:g}/0/{total:g}"


def parser() -> Parser:
    p = Parser("sinfo", "gpufleet's partitions (queues) and nodes as sinfo shows them.")
    p.add_argument("-N", "--Node", action="store_true", help="one line per node")
    p.add_argument("-s", "--summarize", action="store_true", help="one line per partition")
    p.add_argument("-o", "--format", help="sinfo's %%-format")
    p.add_argument("-h", "--noheader", action="store_true", help="no header line")
    p.add_argument("-p", "--partition", help="comma list of partitions")
    p.add_argument("-t", "--states", help="comma list of node states: idle,mix,alloc,…")
    p.add_argument("-a", "--all", action="store_true", help="(every partition: always)")
    return p


def main(argv: list[str] | None = None) -> None:
    a = parser().parse_args(argv)

    def body() -> int:
        with connect("sinfo") as c:
            nodes = sorted(lean_rows(c.nodes()), key=lambda n: n["name"])
            queues = lean_rows(c.queues())
        if a.states:
            keep = {s.strip().lower().rstrip("*") for s in a.states.split(",")}
            nodes = [
                n
                for n in nodes
                if keep & {state(n), *(x.rstrip("*") for x in STATES.get(state(n), ()))}
            ]
        parts = queues_of(queues, nodes)
        if a.partition:
            keep = {q.strip() for q in a.partition.split(",")}
            parts = {q: ns for q, ns in parts.items() if q in keep}
        rows: list[tuple[str, bool, list[Any]]] = []
        for q, of_q in parts.items():
            if a.Node:
                rows += [(q, q == DEFAULT_QUEUE, [n]) for n in of_q]
                continue
            if a.summarize:
                rows.append((q, q == DEFAULT_QUEUE, of_q))
                continue
            groups: dict[str, list[Any]] = {}
            for n in of_q:
                groups.setdefault(state(n), []).append(n)
            rows += [(q, q == DEFAULT_QUEUE, g) for g in groups.values()]
            if not groups:
                rows.append((q, q == DEFAULT_QUEUE, []))
        fmt = a.format or (
            NODE_FORMAT if a.Node else SUMMARY_FORMAT if a.summarize else DEFAULT_FORMAT
        )
        # %#X: as wide as the widest value (sinfo's own)
        widest = {
            "P": max([len("PARTITION"), *(len(r[0]) + r[1] for r in rows)]),
            # at least 9, as Slurm 22.05's (``NODELIST`` and a blank under four nodes n1..n4)
            "N": max([9, *(len(n["name"]) for n in nodes)]) if a.Node else 9,
        }
        for letter, width in widest.items():
            fmt = fmt.replace(f"%#{letter}", f"%{width}{letter}")
            fmt = fmt.replace(f"%.#{letter}", f"%.{width}{letter}")
        fields = _fields()
        empty = {k: v for k, v in fields.items() if k in "PalDF%"}
        table = {k: (v if k in empty else _or_blank(v)) for k, v in fields.items()}
        try:
            sys.stdout.write(format_rows(fmt, rows, table, TITLES, header=not a.noheader))
        except ValueError as e:
            raise Usage(str(e)) from None
        return 0

    run("sinfo", body)


def queues_of(queues: Sequence[Any], nodes: Sequence[Any]) -> dict[str, list[Any]]:
    """Each queue's nodes, ``default`` first (there to submit to even before a job used it),
    then by name; a queue without a node set has every node."""
    sets = {str(q["name"]): tuple((q.get("nodes") or {}).items()) for q in queues}
    sets.setdefault(DEFAULT_QUEUE, ())
    order = sorted(sets, key=lambda q: (q != DEFAULT_QUEUE, q))
    return {
        q: [n for n in nodes if in_node_set((n.get("labels") or {}).items(), sets[q])]
        for q in order
    }


def _or_blank(f: Callable[[Any], str]) -> Callable[[Any], str]:
    """A partition without nodes shows 0 nodes and n/a, as sinfo does."""
    return lambda r: f(r) if r[2] else "n/a"


if __name__ == "__main__":
    main()
