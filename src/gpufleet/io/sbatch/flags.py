"""Slurm's options on ``gpufleet submit``'s command line (flags mode: ``gpufleet submit -N 2
--gres=gpu:4 -- python train.py``), read by sbatch's own reader (getopt over sbatch's option
table, each value checked as sbatch checks it, the counts as its ``_opt_verify``) and mapped
onto a job as an #SBATCH script's are (``build``), without the batch script. Every option is
taken with sbatch's meaning or refused, naming what gpufleet takes instead; every problem at
once. Before an #SBATCH script the same options are the script's command-line options."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.io.sbatch.build import job_terms
from gpufleet.io.sbatch.options import DEFAULT_NO_EFFECT, HONOURED, NO_EFFECT
from gpufleet.io.sbatch.request import Build, SbatchError
from gpufleet.io.sbatch.terms import dependencies
from gpufleet.io.sbatch.verify import apply
from gpufleet.io.slurm_opts import Given, Problem, Word, getopt
from gpufleet.model.arrays import MAX_ARRAY_SIZE

SOURCE = "gpufleet submit"
# sbatch's own behaviour, not the job's: what gpufleet submit takes instead
INSTEAD = {
    "wrap": "give the command after -- (gpufleet submit [OPTIONS] -- COMMAND)",
    "parsable": "gpufleet submit --json prints the job ids",
    "test-only": "gpufleet submit --dry-run shows what would be submitted",
    "wait": "gpufleet submit does not wait; gpufleet logs -f JOB follows the job",
    "help": "see gpufleet submit --help",
    "usage": "see gpufleet submit --help",
    "version": "see gpufleet --version",
    "quiet": "gpufleet submit prints only the job ids",
    "verbose": "gpufleet submit has no verbose mode",
}
# sbatch's options about the batch script itself (its files, its directory, its environment)
BATCH_ONLY = {"output", "error", "open-mode", "input", "chdir", "export", "export-file"}
# the options that set the job's node and task counts: beside them --workers is refused
COUNTS = frozenset({"nodes", "ntasks", "ntasks-per-node", "nodelist"})


@dataclass(frozen=True)
class FlagsJob:
    """The job Slurm's options ask for: its spec without the command, its array and
    dependencies, notes, and the options given (their keys: ``nodes``, ``gres``, …)."""

    spec: dict[str, Any]
    array: str | None
    depends_on: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]
    given: frozenset[str]


def split(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the leading options, as words, without a closing ``--``; the command after them), as
    sbatch's getopt splits its command line: options up to ``--`` or the first other word. A
    value given apart from an option that takes it only after ``=`` (``--nice 5``) is refused
    (SbatchError), not run as the command."""
    given, _, stop = getopt([Word(w, 0) for w in words])
    options, command = list(words[:stop]), list(words[stop:])
    if options and options[-1] == "--":
        options.pop()
    elif command and given and _astray(given[-1], command[0]):
        name = given[-1].option.name
        why = f"--{name} {command[0]}: sbatch takes --{name}'s value only as --{name}={command[0]}"
        raise SbatchError(SOURCE, [Problem(0, why)])
    return options, command


def _astray(last: Given, word: str) -> bool:
    """Whether ``word``, right after an option whose value is optional and was not given, is
    that option's value rather than a command (``--nice 5``, ``--exclusive user``)."""
    if last.option.arg != "optional" or last.value is not None:
        return False
    values = r"[-+]?[0-9]+[SsLl]?|user|mcs|topo|off|set|no|yes|[A-Z][A-Z_]{2,}(,[A-Z_]+)*"
    return re.fullmatch(values, word) is not None


def read_flags(
    options: Sequence[str], *, max_array_size: int = MAX_ARRAY_SIZE, own: Sequence[str] = ()
) -> FlagsJob:
    """The job ``options`` ask for, or a SbatchError naming each option refused (an unknown
    one with the nearest of sbatch's or of ``own``, gpufleet's options); what a job cannot
    express yet is a SpecError, as for a script."""
    given, problems, stop = getopt([Word(w, 0) for w in options])
    problems = [_nearest(p, own) for p in problems]
    if stop < len(options):
        problems.append(Problem(0, f"unexpected argument {options[stop]!r} among the options"))
    problems += [p for g in given if (p := _refusal(g)) is not None]
    req, found = apply(given, SOURCE, max_array_size)
    problems += found
    if problems:
        raise SbatchError(SOURCE, problems)
    seen = {g.option.key: g for g in given}
    b = Build(req, SOURCE, seen, max_array_size)
    spec = job_terms(b)
    if "job-name" not in seen:
        del spec["name"]  # the command's name, as for any command
    return FlagsJob(
        spec, req.array, dependencies(b), req.warnings + tuple(b.notes), frozenset(seen)
    )


def _nearest(p: Problem, own: Sequence[str]) -> Problem:
    """An unknown option told the nearest of gpufleet's own, when sbatch has none near."""
    m = re.match(r"unrecognized option '(--[^'=]+)", p.message)
    if m is None or "did you mean" in p.message:
        return p
    import difflib  # only for a mistyped option

    close = difflib.get_close_matches(m.group(1), [o for o in own if o.startswith("--")], n=1)
    return Problem(p.line, f"{p.message} (did you mean {close[0]}?)") if close else p


def _refusal(g: Given) -> Problem | None:
    key = g.option.key
    if key in INSTEAD:
        return Problem(0, f"{g.text}: {INSTEAD[key]}")
    if key in BATCH_ONLY:
        return Problem(
            0,
            f"{g.text} is sbatch's, for an #SBATCH script: a command's output and error are "
            "its logs (gpufleet logs JOB), it starts in the job user's home",
        )
    if key not in HONOURED:
        return Problem(
            0, f"{g.text} is not taken by gpufleet: {NO_EFFECT.get(key, DEFAULT_NO_EFFECT)}"
        )
    return None
