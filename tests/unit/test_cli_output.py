"""``output.plain_table`` prints what rich prints for the tables it takes on (issue 12: a
listing to a pipe skips rich's rendering), and leaves the others to rich."""

from __future__ import annotations

import contextlib
import io
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cli import output as out


def _rich(columns: list[str], rows: list[list[object]], right: list[str]) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        out.rich_table(columns, rows, right=right)
    return buf.getvalue()


def _plain(columns: list[str], rows: list[list[object]], right: list[str]) -> str | None:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        return out.plain_table(columns, rows, right)


_cell = st.one_of(
    st.none(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(st.characters(min_codepoint=32, max_codepoint=0x3FF), max_size=14),
    st.sampled_from(["8 (2×4)", "(Resources) needs 8 GPUs", "café", "[red]x", " lead", ""]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text("ABCDEFGHIJ()_", min_size=1, max_size=10), min_size=1, max_size=6),
    st.data(),
    st.sampled_from(["", "30", "60", "240"]),
)
def test_plain_table_is_richs_table(columns: list[str], data: st.DataObject, width: str) -> None:
    rows = data.draw(
        st.lists(st.lists(_cell, min_size=len(columns), max_size=len(columns)), max_size=5)
    )
    right = data.draw(st.lists(st.sampled_from(columns), max_size=len(columns)))
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        plain = _plain(columns, rows, right)
        if plain is not None:
            assert plain == _rich(columns, rows, right)
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def test_a_listing_takes_the_plain_path_and_styled_cells_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):  # a pipe, as the worker's may not be
        monkeypatch.delenv(name, raising=False)
    columns = ["JOBID", "NAME", "USER", "QUEUE", "STATE", "GPUS", "TIME", "NODES(REASON)"]
    rows: list[list[object]] = [
        ["12", "train", "ana", "default", "RUNNING", "16 (2×8)", "1h 05m", "node-0,node-1"],
        ["13", "wait", "bo", "default", "PENDING", 8, "-", "(Resources) needs 8 GPUs"],
    ]
    plain = _plain(columns, rows, ["GPUS", "TIME"])
    assert plain is not None and plain == _rich(columns, rows, ["GPUS", "TIME"])
    from rich.text import Text

    assert _plain(["STATE"], [[Text("idle", style="green")]], []) is None
    assert _plain(["NAME"], [["日本語"]], []) is None
