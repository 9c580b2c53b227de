"""The whole of sbatch's reading: the script's own checks, its directives (``lex``), the
options of every component and of the command line (getopt_long, ``options``), and the counts
(``verify``): a :class:`SlurmRequest`, or a :class:`SbatchError` naming every problem."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpufleet.io.sbatch.lex import SPACE, component_words
from gpufleet.io.sbatch.request import SbatchError, SlurmRequest
from gpufleet.io.sbatch.verify import apply
from gpufleet.io.slurm_opts import Given, Problem, Word, getopt
from gpufleet.model.arrays import MAX_ARRAY_SIZE


def read_request(
    text: str,
    *,
    source: str,
    options: Sequence[str] = (),
    max_array_size: int = MAX_ARRAY_SIZE,
    env: Sequence[Given] = (),
) -> SlurmRequest:
    """What sbatch makes of ``text`` (the script at ``source``), of the options its input
    variables set (``env``: ``input_env.env_options``, over the script's) and of command-line
    ``options`` (which win over both), or a SbatchError listing every problem."""
    if not text.strip(SPACE):  # sbatch's _get_script_buffer, in its order
        why = "Batch script contains only whitespace!" if text else "Batch script is empty!"
        raise SbatchError(source, [Problem(1, why)])
    problems = _script_problems(text)
    words, found, warnings, later = component_words(text, source)
    components = len(later) + 1
    problems += found
    given, found_opts, stop = getopt(words)
    problems += found_opts
    for other in later:  # sbatch reads every component: what it refuses there, it refuses
        other_given, found_opts, other_stop = getopt(other)
        problems += found_opts
        if other_stop < len(other):
            problems.append(Problem(other[other_stop].line, _invalid_directive(other, other_stop)))
        problems += apply(other_given, source, max_array_size)[1]
    if stop < len(words):  # sbatch stops reading options there and names that word only
        problems.append(Problem(words[stop].line, _invalid_directive(words, stop)))
    cli = [Word(o, 0) for o in options]
    cli_given, cli_problems, cli_stop = getopt(cli)
    problems += cli_problems
    if cli_stop < len(cli):
        problems.append(Problem(0, f"unexpected argument {cli[cli_stop].text!r}"))
    req, found = apply(given + list(env) + cli_given, source, max_array_size)
    problems += found
    if components > 1:
        warnings.append(
            f"{source}: a heterogeneous job ({components} components): gpufleet reads only "
            "the first component's directives"
        )
    if problems:
        raise SbatchError(source, sorted(problems, key=lambda p: (p.line == 0, p.line)))
    return replace(req, warnings=tuple(warnings) + req.warnings, het_components=components)


def _script_problems(text: str) -> list[Problem]:
    """What sbatch's _get_script_buffer refuses in a script that is not blank, in its order."""
    problems: list[Problem] = []
    if not text.startswith("#!"):
        problems.append(
            Problem(
                1,
                "This does not look like a batch script. The first line must start "
                "with #! followed by the path to an interpreter.",
            )
        )
    if "\r\n" in text:
        n = text[: text.index("\r\n")].count("\n") + 1
        problems.append(Problem(n, "Batch script contains DOS line breaks (\\r\\n)"))
    if "\0" in text:
        n = text[: text.index("\0")].count("\n") + 1
        problems.append(Problem(n, "The batch script contains a NULL character"))
    return problems


def _invalid_directive(words: Sequence[Word], stop: int) -> str:
    w = words[stop]
    message = f"Invalid directive found in batch script: {w.text}"
    later = [x for x in words[stop + 1 :] if x.text.startswith("-")]
    if later:  # they look like options, but sbatch never reads them: say so once
        message += f" (the options after it, from line {later[0].line}, are not read)"
    return message
