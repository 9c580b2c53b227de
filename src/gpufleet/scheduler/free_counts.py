"""Helpers of ``Workspace`` that read free vectors, memoised by value, and bucket order.

A node's free vector (free milli per device) takes few distinct values (with whole GPUs, which
devices are taken), so its count of fully free devices and whether one is partly used are
memoised by value: the workspace asks at every assignment and release."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import overload

from gpufleet.model.resources import MILLI
from gpufleet.scheduler.snapshot import NodeView


class EmptiedViews(Sequence[NodeView]):
    """``views`` as if every device, CPU and byte of memory were free; each view is made on
    first read (a workspace reads few of them), not all up front."""

    def __init__(self, nodes: Sequence[NodeView]) -> None:
        self._nodes = nodes
        self._made: dict[int, NodeView] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    @overload
    def __getitem__(self, i: int) -> NodeView: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[NodeView]: ...
    def __getitem__(self, i: int | slice) -> NodeView | Sequence[NodeView]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self._nodes)
        v = self._made.get(i)
        if v is None:
            n = self._nodes[i]
            v = self._made[i] = replace(
                n, gpu_free=(MILLI,) * n.gpus, cpu_free=n.cpu_total, mem_free=n.mem_total
            )
        return v


def with_in_order(bucket: dict[int, None], i: int) -> dict[int, None]:
    """``bucket`` with ``i`` added in index order (the order of a fresh workspace)."""
    if not bucket or i > next(reversed(bucket)):
        bucket[i] = None
        return bucket
    return dict.fromkeys(sorted([*bucket, i]))


_MEMO_MAX = 1 << 14
_full_memo: dict[tuple[int, ...], int] = {}
_partial_memo: dict[tuple[int, ...], bool] = {}


def full_count(g: tuple[int, ...]) -> int:
    """Fully free devices among ``g``."""
    n = _full_memo.get(g)
    if n is None:
        if len(_full_memo) >= _MEMO_MAX:
            _full_memo.clear()
        n = _full_memo[g] = sum(1 for x in g if x >= MILLI)
    return n


def partly_used(g: tuple[int, ...]) -> bool:
    """Whether a device of ``g`` is partly used."""
    p = _partial_memo.get(g)
    if p is None:
        if len(_partial_memo) >= _MEMO_MAX:
            _partial_memo.clear()
        p = _partial_memo[g] = any(0 < x < MILLI for x in g)
    return p
