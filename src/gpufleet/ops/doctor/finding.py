"""A doctor's finding: what was checked, what was seen, the likely cause, the next step."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    ERROR = "error"  # this is (or explains) the failure
    WARNING = "warning"  # wrong, and may cause failures
    INFO = "info"  # worth knowing; nothing to fix
    OK = "ok"  # checked and fine


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    seen: str
    cause: str
    next_step: str
    severity: Severity = Severity.ERROR
    target: str = ""  # the node, the job or one of its ranks
    code: str = ""  # a stable name of the signature or rule, for scripts

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["severity"] = self.severity.value
        return d


def ok(check: str, seen: str, target: str = "", code: str = "") -> Finding:
    return Finding(check, seen, "", "", Severity.OK, target, code)


def worst(findings: list[Finding]) -> Severity:
    for s in (Severity.ERROR, Severity.WARNING, Severity.INFO):
        if any(f.severity is s for f in findings):
            return s
    return Severity.OK
