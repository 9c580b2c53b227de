"""``base/jsonc.py`` (the shims' JSON through ``_json``, without ``json``'s import of ``re``)
writes and reads what ``json`` does, and refuses what it refuses, with its errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.base import jsonc
from gpufleet.client.calls import _next_link

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (json reads NaN back as a NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@given(documents)
def test_dumps_writes_what_json_writes(doc: Any) -> None:
    assert jsonc.dumps(doc) == json.dumps(doc, ensure_ascii=False)


@given(documents)
def test_loads_reads_what_json_reads(doc: Any) -> None:
    text = json.dumps(doc)
    assert same(jsonc.loads(text), json.loads(text))
    assert same(jsonc.loads(f" \n{text}\t ".encode()), json.loads(text))


def test_an_object_hook_is_applied_to_every_object() -> None:
    class Row(dict[str, Any]):
        pass

    doc = jsonc.loads('[{"a": {"b": 1}}]', object_hook=Row)
    assert type(doc[0]) is Row and type(doc[0]["a"]) is Row


@pytest.mark.parametrize("bad", ["", "  ", '{"a":}', "[1] x", "[1,", '"\\x"', "{'a': 1}"])
def test_malformed_documents_raise_jsons_own_error(bad: str) -> None:
    with pytest.raises(json.JSONDecodeError) as ours:
        jsonc.loads(bad)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(bad)
    assert (ours.value.msg, ours.value.pos) == (theirs.value.msg, theirs.value.pos)


def test_what_json_cannot_write_is_refused_alike() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsonc.dumps({"a": object()})


@pytest.mark.parametrize(
    "modules",
    [
        "gpufleet.shims.sbatch, gpufleet.client.lean, gpufleet.base.settings",  # sbatch
        "gpufleet.shims.squeue, gpufleet.client.lean",  # squeue
        # gpufleet submit's fast path, up to its request
        "gpufleet.cli.entry, gpufleet.cli.submit_fast, gpufleet.cli.submit_flags, "
        "gpufleet.model.errors, gpufleet.client.lean",
    ],
)
def test_a_fast_command_never_imports_json_re_typing_or_socket(modules: str) -> None:
    """The point of it (issue 27): what a shim's or the fast path's command imports."""
    heavy = ("json", "re", "socket", "enum", "collections", "typing", "rich", "argparse")
    code = (
        f"import sys; import {modules}; print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}; {code}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.split() == []


@pytest.mark.parametrize(
    ("header", "target"),
    [
        ('</a?cursor=5>; rel="next"', "/a?cursor=5"),
        ("</a?cursor=5>;rel=next", "/a?cursor=5"),
        ('</p>; rel="prev", </n>; rel="next"', "/n"),
        ('</n>; title="x"; rel="next last"', "/n"),
        ('</n>; REL="Next"', "/n"),
        ('</p>; rel="prev"', None),
        ("", None),
        ("garbage", None),
    ],
)
def test_the_next_link_is_read_as_rfc_8288_writes_it(header: str, target: str | None) -> None:
    assert _next_link(header) == target
