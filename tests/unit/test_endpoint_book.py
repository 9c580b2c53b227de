"""The services' endpoint ports (server/endpoints.py): a removed service's port goes to a new
service only once no other port is free, the longest given up first."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.server.endpoints import EndpointBook


def test_a_port_given_up_is_handed_out_again_last(tmp_path: Path) -> None:
    book = EndpointBook(tmp_path / "ep.json", 40000, 3)
    assert [book.endpoint(n).port for n in ("a", "b")] == [40000, 40001]
    book.forget("a")  # a page left open on a's port must not load the next service's
    assert book.endpoint("c").port == 40002
    assert book.endpoint("d").port == 40000  # no other is free: the one given up
    book.forget("b")
    book.forget("c")
    assert book.endpoint("e").port == 40001  # both given up: the longest ago first
    assert book.endpoint("f").port == 40002
    with pytest.raises(ValueError, match="every gateway port of 40000-40002 is taken"):
        book.endpoint("g")
    assert EndpointBook(tmp_path / "ep.json", 40000, 3).get("e") == book.get("e")  # kept
