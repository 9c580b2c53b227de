"""The two connections every part of the store works through, given by ``Store`` (store.py):
the parts in their own modules (node operations, endpoints) are written against this."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager

import sqlalchemy as sa


class Connections(ABC):
    @abstractmethod
    def _write(self) -> AbstractContextManager[sa.Connection]:
        """A transaction that commits on leaving (fenced by the leader's epoch under --ha)."""

    @abstractmethod
    def _read(self, snapshot: bool = False) -> AbstractContextManager[sa.Connection]:
        """A connection to read through; ``snapshot``: one consistent view."""
