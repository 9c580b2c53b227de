"""Service endpoints in the store (controllers in high availability, ADR 0044): what one
controller handed out, another reads back at its takeover, the same port and token; a
rotated token and a removed service too."""

from __future__ import annotations

from typing import Any

from gpufleet.server.endpoints import StoredEndpointBook


def test_a_new_leader_reads_back_the_endpoints_its_predecessor_handed_out(store: Any) -> None:
    old = StoredEndpointBook(store, 31500, 10)
    standby = StoredEndpointBook(store, 31500, 10)  # made before any service existed
    web, llm = old.endpoint("web"), old.endpoint("llm")
    assert (web.port, llm.port) == (31500, 31501)
    assert standby.get("web") is None
    standby.reload()  # its takeover
    assert standby.get("web") == web and standby.get("llm") == llm
    rotated = standby.rotate("web")
    standby.forget("llm")
    assert rotated.port == web.port and rotated.token != web.token
    third = StoredEndpointBook(store, 31500, 10)
    assert third.get("web") == rotated and third.get("llm") is None
    assert third.endpoint("new").port == 31501  # the freed port again
