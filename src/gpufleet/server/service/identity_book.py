"""What the controller keeps of its questions about users' accounts (``identity.py``)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class AccountBook:
    """The users the controller asks the nodes about, most recent last, and who waits for
    answers. The answers themselves are the core's (``Controller.state.accounts``)."""

    enabled: bool = True
    checking: set[str] = field(default_factory=set)  # the nodes that run tasks as owners
    recent: OrderedDict[str, None] = field(default_factory=OrderedDict)
    waiting: dict[str, tuple[set[str], asyncio.Event]] = field(default_factory=dict)
    told: dict[str, str] = field(default_factory=dict)  # the UID mismatches reported, by user
    # how long a user's first submission waits for the nodes' answers (0: not at all; the job
    # is accepted and waits with its Reason until they come)
    first_wait_s: float = 2.0
    asked_at: dict[str, float] = field(default_factory=dict)  # per node: its last re-check
    # the users of unfinished jobs, with the (core, pass, job count) they were worked out at
    busy: tuple[tuple[int, int, int], frozenset[str]] | None = None
