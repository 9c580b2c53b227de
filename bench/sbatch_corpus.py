"""How often gpufleet's ``#SBATCH`` reader makes of a script what sbatch makes of it.

Reads every script of a corpus folder (``tests/unit/sbatch_corpus``: scripts in the styles sites
and projects publish, each with what sbatch makes of it in ``expected.yaml``, worked out from
Slurm's documentation and source) with :func:`gpufleet.io.sbatch.read_request`, as
``gpufleet submit --parse-only`` does, and compares field by field: name, nodes, tasks, tasks
per node, GPUs, CPUs, memory, time, partition, array, dependency, output, error, and whether
the script is accepted (for a refused one: also the reason and the lines it names). Prints the
accuracy of each field and of whole scripts (every field right).

    .venv/bin/python bench/sbatch_corpus.py [CORPUS_DIR] [-v]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpufleet.io import slurm_values as v
from gpufleet.io.sbatch import SbatchError, SlurmRequest, read_request, read_script

FIELDS = (
    "name", "nodes", "ntasks", "tasks_per_node", "gpus", "cpus", "mem", "time", "partition",
    "array", "dependency", "output", "error",
)  # fmt: skip
EXPECTED = "expected.yaml"


def _gpus(kind: str, items: Iterable[v.Gpus]) -> str:
    return f"{kind}:" + ",".join(f"{g.type}:{g.count}" if g.type else str(g.count) for g in items)


def fields(req: SlurmRequest) -> dict[str, Any]:
    """A request in the corpus's terms (see expected.yaml's header)."""
    lo, hi = req.nodes
    gpus = [
        _gpus(kind, items)
        for kind, items in (
            ("node", req.gpus_per_node),
            ("job", req.gpus),
            ("task", req.gpus_per_task),
            ("socket", req.gpus_per_socket),
        )
        if items
    ]
    cpus = [f"{k}:{n}" for k, n in (("task", req.cpus_per_task), ("gpu", req.cpus_per_gpu))
            if n is not None]  # fmt: skip
    mems = (("node", req.mem_per_node_mb), ("cpu", req.mem_per_cpu_mb), ("gpu", req.mem_per_gpu_mb))
    mem = [f"{k}:{n}" for k, n in mems if n is not None]
    return {
        "name": req.job_name,
        "nodes": str(lo) if lo == hi else f"{lo}-{hi or ''}",
        "ntasks": req.ntasks,
        "tasks_per_node": req.ntasks_per_node,
        "gpus": " ".join(gpus) or None,
        "cpus": " ".join(cpus) or None,
        "mem": " ".join(mem) or None,
        "time": req.time_limit,
        "partition": ",".join(req.partitions) or None,
        "array": req.array,
        "dependency": req.dependency,
        "output": req.output,
        "error": req.error,
    }


def expected_fields(script: str, exp: dict[str, Any]) -> dict[str, Any]:
    """The expectation with sbatch's defaults filled in."""
    output = exp.get("output", "slurm-%A_%a.out" if "array" in exp else "slurm-%j.out")
    out: dict[str, Any] = {"name": script, "nodes": "1", "ntasks": 1, "output": output}
    out["error"] = output
    out.update({k: exp[k] for k in FIELDS if k in exp})
    return {k: out.get(k) for k in FIELDS}


@dataclass
class Result:
    script: str
    accepted: bool
    expected_accepted: bool
    wrong: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # field: (got, expected)
    checked: list[str] = field(default_factory=list)  # the fields compared
    errors: list[str] = field(default_factory=list)  # the reader's messages, when refused


def check(path: Path, exp: dict[str, Any]) -> Result:
    """Read one script and compare it with its expectation."""
    source = str(path)
    want_ok = bool(exp.get("accepted", True))
    try:
        req: SlurmRequest | None = read_request(read_script(path), source=source)
        problems: tuple[Any, ...] = ()
    except SbatchError as e:
        req, problems = None, e.problems
    r = Result(path.name, req is not None, want_ok)
    r.checked.append("accepted")
    if r.accepted != want_ok:
        r.wrong["accepted"] = (r.accepted, want_ok)
    if req is None:
        r.errors = [f"{p.line}: {p.message}" for p in problems]
    if not want_ok:
        r.checked.append("reason")
        lines = sorted({p.line for p in problems})
        text = " | ".join(p.message.lower() for p in problems)
        missing = [s for s in exp.get("reasons", []) if s.lower() not in text]
        if req is not None or missing or lines != sorted(exp.get("lines", [])):
            r.wrong["reason"] = (r.errors, {"lines": exp.get("lines"), "reasons": missing})
        return r
    want = expected_fields(path.name, exp)
    got = fields(req) if req is not None else dict.fromkeys(FIELDS, "(refused)")
    for k in FIELDS:
        r.checked.append(k)
        if got[k] != want[k]:
            r.wrong[k] = (got[k], want[k])
    return r


def run(corpus: Path) -> list[Result]:
    expected: dict[str, dict[str, Any]] = yaml.safe_load((corpus / EXPECTED).read_text()) or {}
    scripts = sorted(
        p.name
        for p in corpus.iterdir()
        if p.is_file() and p.name != EXPECTED and not p.name.startswith(".")
    )
    unlisted = sorted(set(scripts) ^ set(expected))
    if unlisted:
        raise SystemExit(f"{corpus}: scripts and {EXPECTED} disagree on: {', '.join(unlisted)}")
    return [check(corpus / name, expected[name] or {}) for name in scripts]


def table(results: list[Result]) -> str:
    """Per-field accuracy, then whole scripts."""
    names = ["accepted", "reason", *FIELDS]
    rows = ["| field | right | of | accuracy |", "| --- | ---: | ---: | ---: |"]
    total = right = 0
    for name in names:
        n = sum(name in r.checked for r in results)
        ok = sum(name in r.checked and name not in r.wrong for r in results)
        total, right = total + n, right + ok
        if n:
            rows.append(f"| {name} | {ok} | {n} | {100 * ok / n:.1f} % |")
    rows.append(f"| **all fields** | {right} | {total} | {100 * right / total:.1f} % |")
    whole = sum(not r.wrong for r in results)
    rows.append(
        f"| **whole scripts** | {whole} | {len(results)} | {100 * whole / len(results):.1f} % |"
    )
    refused_ok = sum(r.expected_accepted and not r.accepted for r in results)
    rows.append(f"\nscripts sbatch accepts that were refused: {refused_ok}")
    return "\n".join(rows)


def score(results: list[Result]) -> float:
    total = sum(len(r.checked) for r in results)
    return sum(len(r.checked) - len(r.wrong) for r in results) / total


CORPUS = Path(__file__).resolve().parents[1] / "tests/unit/sbatch_corpus"  # the checkout's


def main(argv: list[str] | None = None, default: Path | None = CORPUS) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=default)
    ap.add_argument("-v", "--verbose", action="store_true", help="print each disagreement")
    a = ap.parse_args(argv)
    if a.corpus is None:
        ap.error("give the corpus folder")
    results = run(a.corpus)
    if a.verbose:
        for r in results:
            for k, (got, want) in r.wrong.items():
                print(f"{r.script}: {k}: got {got!r}, sbatch: {want!r}")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
