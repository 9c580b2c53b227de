"""The routers call the service only: none reaches into the core's controller (``svc.ctrl``)
or the service's store (``svc.store``); what they show comes from the service's methods
(server/reads.py, server/service/requests.py). Nor does listing.py, the read side of GET /jobs.
Checked on the source, so that it stays so."""

from __future__ import annotations

import ast
from importlib.resources import files
from pathlib import Path

import pytest

SERVER = Path(str(files("gpufleet.server")))
READ_SIDE = [*sorted((SERVER / "routers").glob("*.py")), SERVER / "listing.py"]


def reaches_into_core(source: str) -> list[int]:
    """The lines that read a ``ctrl`` attribute (``x.ctrl``, ``getattr(x, "ctrl")``)."""

    def reads_ctrl(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr == "ctrl"
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr")
            and any(isinstance(a, ast.Constant) and a.value == "ctrl" for a in node.args)
        )

    return sorted(node.lineno for node in ast.walk(ast.parse(source)) if reads_ctrl(node))


def test_the_check_sees_each_way_of_reaching_the_controller() -> None:
    src = (
        "def f(svc):\n"
        "    a = svc.ctrl.jobs\n"
        "    c = svc.ctrl\n"
        "    return getattr(svc, 'ctrl'), svc.job('x'), svc.control\n"
    )
    assert reaches_into_core(src) == [2, 3, 4]


def test_there_are_routers_to_check() -> None:
    names = {p.name for p in READ_SIDE}
    assert {"jobs.py", "nodes.py", "queues.py", "dashboard.py", "agent.py"} <= names


@pytest.mark.parametrize("path", READ_SIDE, ids=lambda p: p.name)
def test_a_router_reads_the_core_through_the_service_only(path: Path) -> None:
    lines = reaches_into_core(path.read_text())
    assert not lines, (
        f"{path.name} reaches into the controller (svc.ctrl) on lines {lines}: "
        "add a read method to the service (server/reads.py) and call that"
    )


def reaches_into_store(source: str) -> list[int]:
    """The lines that read the service's store (``svc.store``, ``service.store``)."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "store"
        and isinstance(node.value, ast.Name)
        and node.value.id in ("svc", "service")
    )


def test_the_check_sees_the_service_s_store() -> None:
    src = "def f(svc, request):\n    a = svc.store.job('x')\n    return request.app.state.store\n"
    assert reaches_into_store(src) == [2]


@pytest.mark.parametrize("path", READ_SIDE, ids=lambda p: p.name)
def test_a_router_asks_the_service_not_its_store(path: Path) -> None:
    lines = reaches_into_store(path.read_text())
    assert not lines, (
        f"{path.name} reaches into the service's store (svc.store) on lines {lines}: "
        "add a method to the service (server/service/requests.py) and call that"
    )
