"""Slurm's node feature expressions (``--constraint``/``-C``), as far as gpufleet honours them.

Read (Slurm's own syntax): a feature name; ``a&b`` (every node has both); ``a|b`` (each node has
either); ``[a|b|c]`` (a *matching OR*: every node of the job has the same one of them);
parentheses to group; ``&`` binds tighter than ``|``. Refused, saying so: node counts
(``a*2``), and a matching OR anywhere but at the top of the expression (alone or ANDed with
plain features), which is the form Slurm documents.

``parse`` returns a tree; ``Constraint.holds(features)`` tests one node; ``choices()`` gives,
for a matching OR, one plain expression per choice (the scheduler tries them in order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CONSTRAINT = 1024  # characters; Slurm's expressions are a few words
_TOKEN = re.compile(r"\s*(?:([A-Za-z0-9_.:+/-]+)|(\*[0-9]*)|([&|\[\]()!,]))")


@dataclass(frozen=True, slots=True)
class Feat:
    name: str

    def holds(self, features: frozenset[str]) -> bool:
        return self.name in features

    def text(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class All:
    parts: tuple[Node, ...]

    def holds(self, features: frozenset[str]) -> bool:
        return all(p.holds(features) for p in self.parts)

    def text(self) -> str:
        return "&".join(_group(p) for p in self.parts)


@dataclass(frozen=True, slots=True)
class Any_:
    parts: tuple[Node, ...]

    def holds(self, features: frozenset[str]) -> bool:
        return any(p.holds(features) for p in self.parts)

    def text(self) -> str:
        return "|".join(_group(p) for p in self.parts)


@dataclass(frozen=True, slots=True)
class Match:
    """``[a|b]``: per node, any of them; over the job, one and the same."""

    names: tuple[str, ...]

    def holds(self, features: frozenset[str]) -> bool:
        return any(n in features for n in self.names)

    def text(self) -> str:
        return "[" + "|".join(self.names) + "]"


Node = Feat | All | Any_ | Match


def _group(n: Node) -> str:
    return f"({n.text()})" if isinstance(n, Any_ | All) else n.text()


@dataclass(frozen=True, slots=True)
class Constraint:
    root: Node

    def holds(self, features: frozenset[str]) -> bool:
        return self.root.holds(features)

    def text(self) -> str:
        return self.root.text()

    def names(self) -> set[str]:
        out: set[str] = set()
        stack: list[Node] = [self.root]
        while stack:
            n = stack.pop()
            if isinstance(n, Feat):
                out.add(n.name)
            elif isinstance(n, Match):
                out.update(n.names)
            else:
                stack.extend(n.parts)
        return out

    def choices(self) -> tuple[Constraint, ...]:
        """One constraint per choice of the matching OR (itself when there is none)."""
        root = self.root
        match = root if isinstance(root, Match) else None
        rest: tuple[Node, ...] = ()
        if isinstance(root, All):
            ms = [p for p in root.parts if isinstance(p, Match)]
            if ms:
                match = ms[0]
                rest = tuple(p for p in root.parts if not isinstance(p, Match))
        if match is None:
            return (self,)
        return tuple(Constraint(All((*rest, Feat(n))) if rest else Feat(n)) for n in match.names)


def parse(text: str) -> Constraint:
    """The expression ``text``; ValueError says what and where it is wrong."""
    if len(text) > MAX_CONSTRAINT:
        raise ValueError(f"must be at most {MAX_CONSTRAINT} characters, got {len(text)}")
    toks = _tokens(text)
    p = _Parser(text, toks)
    root = p.expr()
    if p.i < len(toks):
        raise ValueError(f"unexpected {toks[p.i]!r} in {text!r}")
    matches = _matches(root)
    if matches > 1 or (matches == 1 and not _top_match(root)):
        raise ValueError(
            f"{text!r}: a matching OR [a|b] is supported only once, at the top of the "
            "expression (alone or joined to plain features with &)"
        )
    return Constraint(root)


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    s = text.rstrip()
    while i < len(s):
        m = _TOKEN.match(s, i)
        if m is None or m.end() == i:
            raise ValueError(f"unexpected character {s[i]!r} in {text!r} (at {i + 1})")
        tok = m.group(1) or m.group(2) or m.group(3)
        if m.group(2):
            raise ValueError(
                f"{text!r}: node counts ({tok}) are not supported: gpufleet filters every node "
                "of a job by the same features"
            )
        if tok in ("!", ","):
            raise ValueError(f"{text!r}: {tok!r} is not supported (use & for AND, | for OR)")
        out.append(tok)
        i = m.end()
    if not out:
        raise ValueError("an empty constraint names no feature")
    return out


class _Parser:
    def __init__(self, text: str, toks: list[str]) -> None:
        self.text, self.toks, self.i = text, toks, 0

    def peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def take(self) -> str:
        t = self.peek()
        if not t:
            raise ValueError(f"{self.text!r} ends where a feature name was expected")
        self.i += 1
        return t

    def expr(self) -> Node:
        parts = [self.conj()]
        while self.peek() == "|":
            self.take()
            parts.append(self.conj())
        return parts[0] if len(parts) == 1 else Any_(tuple(parts))

    def conj(self) -> Node:
        parts = [self.atom()]
        while self.peek() == "&":
            self.take()
            parts.append(self.atom())
        return parts[0] if len(parts) == 1 else All(tuple(parts))

    def atom(self) -> Node:
        t = self.take()
        if t == "(":
            inner = self.expr()
            if self.peek() != ")":
                raise ValueError(f"{self.text!r}: '(' without its ')'")
            self.take()
            return inner
        if t == "[":
            names = [self.name()]
            while self.peek() == "|":
                self.take()
                names.append(self.name())
            close = self.peek()
            if close != "]":
                raise ValueError(
                    f"{self.text!r}: inside [...] only names joined by | are supported, got "
                    f"{close or 'the end'!r}"
                )
            self.take()
            return Match(tuple(names))
        if not _is_name(t):
            raise ValueError(f"{self.text!r}: expected a feature name, got {t!r}")
        return Feat(t)

    def name(self) -> str:
        t = self.take()
        if not _is_name(t):
            raise ValueError(f"{self.text!r}: expected a feature name, got {t!r}")
        return t


def _is_name(t: str) -> bool:
    return t not in ("&", "|", "[", "]", "(", ")")


def _matches(n: Node) -> int:
    if isinstance(n, Match):
        return 1
    if isinstance(n, Feat):
        return 0
    return sum(_matches(p) for p in n.parts)


def _top_match(n: Node) -> bool:
    if isinstance(n, Match):
        return True
    return isinstance(n, All) and all(isinstance(p, Feat | Match) for p in n.parts)
