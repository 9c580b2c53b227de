"""Providers by name, as the scheduler's plugins are: the cluster spec names one per pool;
an unknown name, or one that runs only in the simulator, fails at start-up.

A provider's ``resume`` asks for nodes and returns once the ask is made (the node's agent
registers itself later, or not: the core's resume timeout judges); it raises
``ProviderError`` when the ask failed. ``suspend`` releases nodes that run nothing. Both run
on a worker thread, never on the controller's loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.elastic import Provider


class ProviderError(RuntimeError):
    """The provider could not make (or release) the nodes: why, in a line."""


class PowerProvider(Protocol):
    def resume(self, pool: str, nodes: Sequence[NodeSpec]) -> None: ...

    def suspend(self, pool: str, names: Sequence[str]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ProviderContext:
    """What a provider may need of the controller: where agents reach it, where it keeps its
    files, and how to make an agent token for a node (the ``local`` provider)."""

    url: str
    data_dir: Path
    heartbeat_s: float = 5.0
    ca: Path | None = None
    agent_token: Callable[[str], str] = field(default=lambda node: "")


def make(spec: Provider, ctx: ProviderContext) -> PowerProvider:
    if spec.name == "command":
        from gpufleet.server.elastic.command import CommandProvider

        return CommandProvider(spec, ctx)
    if spec.name == "local":
        from gpufleet.server.elastic.local import LocalProvider

        return LocalProvider(spec, ctx)
    raise ValueError(
        f"elastic provider {spec.name!r} runs only in the simulator: a live pool names "
        "command or local"
    )


def providers(cluster: ClusterSpec | None, ctx: ProviderContext) -> dict[str, PowerProvider]:
    """Each elastic pool's provider, by pool name (ValueError for one that cannot run live)."""
    if cluster is None:
        return {}
    return {p.name: make(p.spec.provider, ctx) for p in cluster.elastic}
