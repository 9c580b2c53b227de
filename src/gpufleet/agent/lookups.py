"""The agent's side of identity (ADR 0037): it answers the controller's "accounts" commands,
one NSS lookup per user asked about, and says at registration whether it runs tasks as their
owners (only then is it asked)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from gpufleet.agent.accounts import look_up
from gpufleet.api.schemas import AccountAnswers, AgentCommand

log = logging.getLogger(__name__)


class Answers(Protocol):
    def accounts(self, node: str, answers: AccountAnswers) -> None: ...


class Lookups:
    """Answers kept until the controller took them: the command that asked is acknowledged by
    the next poll whatever happens to the answer, so an answer that failed goes again with the
    next round's."""

    def __init__(self) -> None:
        self.unsent: dict[str, int | None] = {}

    def answer(
        self, client: Answers, node: str, cmds: Sequence[AgentCommand]
    ) -> list[AgentCommand]:
        """Answer the "accounts" commands of ``cmds`` (and what failed to go before); the
        other commands, for the state machine. Raises (after keeping them) when they fail."""
        rest = []
        for c in cmds:
            if c.kind == "accounts":
                self.unsent.update(look_up(c.users))
            else:
                rest.append(c)
        if self.unsent:
            client.accounts(node, AccountAnswers(answers=self.unsent))
            log.info("told the controller about %d user account(s)", len(self.unsent))
            self.unsent = {}
        return rest
