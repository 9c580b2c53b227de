"""``selection.cancel``: what scancel and ``gpufleet cancel`` count as a failure. A job that has
ended, or that no one knows, is a failure for ``gpufleet cancel``; for scancel (``gone`` given)
it is not, as Slurm 22.05's scancel exits 0 on it and names it only with ``-v``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

from gpufleet.cli import selection
from gpufleet.client.errors import ApiError


class Jobs:
    """Job 1 cancels; job 2 ended already (409); no one knows job 3 (404); job 4 is not the
    caller's (403)."""

    refusals: ClassVar[dict[str, ApiError]] = {
        "2": ApiError(409, "job 2 has already ended (CANCELLED)"),
        "3": ApiError(404, "unknown job 3"),
        "4": ApiError(403, "job 4 is not yours"),
    }

    def cancel(self, jid: str) -> Any:
        if jid in self.refusals:
            raise self.refusals[jid]
        return SimpleNamespace(id=jid, array_id=None)

    def job(self, jid: str) -> Any:
        return SimpleNamespace(id=jid, array_id=None)

    def jobs(self, **_: Any) -> list[Any]:
        return []


def test_without_gone_every_refusal_is_a_failure() -> None:
    said: list[str] = []
    done, failed = selection.cancel(
        Jobs(), ["1", "2", "3", "4"], user=None, names=None, wanted=None, report=said.append
    )
    assert [j.id for j in done] == ["1"] and failed == 3
    assert [m.split(":")[0] for m in said] == ["job 2", "job 3", "job 4"]


def test_with_gone_an_ended_or_unknown_job_is_no_failure() -> None:
    said: list[str] = []
    gone: list[str] = []
    done, failed = selection.cancel(
        Jobs(), ["1", "2", "3", "4"], user=None, names=None, wanted=None,
        report=said.append, gone=gone.append,
    )  # fmt: skip
    assert [j.id for j in done] == ["1"]
    assert failed == 1 and said == ["job 4: job 4 is not yours (403)"]
    assert gone == [
        "job 2: job 2 has already ended (CANCELLED) (409)",
        "job 3: unknown job 3 (404)",
    ]
