"""The script's text as sbatch lexes it (Slurm's ``src/sbatch/opt.c``): the directive lines
(``#SBATCH``, or ``#SLURM``, before the first command line), each split into words as sbatch's
``get_argument`` splits them, grouped by heterogeneous-job component."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gpufleet.io.slurm_opts import Problem, Word

SPACE = " \t\n\v\f\r"  # C's isspace


def read_script(path: str | Path) -> str:
    """A script's text as sbatch reads it: bytes as they are (no newline translation, so a DOS
    line break is seen and refused as sbatch refuses it; bytes that are not UTF-8, a Latin-1
    comment, are kept as lone surrogates: sbatch reads such a script). OSError as raised."""
    return Path(path).read_bytes().decode("utf-8", errors="surrogateescape")


def looks_like_sbatch(path: Path) -> bool:
    """True when ``path`` is a readable file whose header carries an ``#SBATCH`` directive."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(True for _ in header(text))


def header(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number, magic word, the text after it) for each directive line, as sbatch finds
    them: lines that start with ``#SBATCH`` (or ``#SLURM``), up to the first line that is
    neither blank nor a comment."""
    for n, line in enumerate(text.split("\n"), start=1):
        for magic in ("#SBATCH", "#SLURM"):
            if line.startswith(magic):
                yield n, magic, line[len(magic) :]
                break
        else:
            stripped = line.lstrip(SPACE)
            if stripped and not stripped.startswith("#"):
                return


def split_directive(rest: str) -> tuple[list[str], str]:
    """The words of one directive line as sbatch's get_argument splits them, and a problem
    ("" when none): quotes (' or ") group, a backslash keeps the next character, an unquoted
    ``#`` ends the line."""
    words: list[str] = []
    i, n = 0, len(rest)
    while True:
        while i < n and rest[i] in SPACE:
            i += 1
        if i >= n:
            return words, ""
        if rest[i] == ":":
            return words, f"Unexpected `:` in [{rest.strip()}]"
        word: list[str] = []
        quote = ""
        escape = False
        while i < n and (quote or rest[i] not in SPACE):
            c = rest[i]
            if escape:
                escape = False
            elif c == "\\":
                escape = True
                i += 1
                continue
            elif quote:
                if c == quote:
                    quote = ""
                    i += 1
                    continue
            elif c in "\"'":
                quote = c
                i += 1
                continue
            elif c == "#":
                break
            word.append(c)
            i += 1
        if quote:
            return words, f"Unmatched `{quote}` in [{rest.strip()}]"
        if not word:
            return words, ""  # an unquoted "#": the rest of the line is a comment
        words.append("".join(word))


def component_words(
    text: str, source: str
) -> tuple[list[Word], list[Problem], list[str], list[list[Word]]]:
    """(words of the first component's directives, problems, warnings, the words of each
    later component of a heterogeneous job)."""
    words: list[Word] = []
    later: list[list[Word]] = []
    problems: list[Problem] = []
    warnings: list[str] = []
    component = 0
    for n, magic, rest in header(text):
        if magic == "#SLURM" and not any("#SLURM" in w for w in warnings):
            warnings.append(
                f"{source}:{n}: #SLURM: sbatch reads it as #SBATCH, with an error asking to "
                "change it to #SBATCH"
            )
        low = rest.lower()
        for sep in ("packjob", "hetjob"):  # sbatch blanks the first separator word out
            k = low.find(sep)
            if k >= 0:
                rest = rest[:k] + " " * len(sep) + rest[k + len(sep) :]
                component += 1
                break
        line_words, problem = split_directive(rest)
        if problem:
            problems.append(Problem(n, problem))
        while len(later) < component:
            later.append([])
        (later[component - 1] if component else words).extend(Word(w, n) for w in line_words)
    return words, problems, warnings, later
