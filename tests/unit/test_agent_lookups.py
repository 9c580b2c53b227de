"""The agent answers the controller's "accounts" commands with NSS lookups on its node, and an
answer that failed to reach the controller goes again with the next round's."""

from __future__ import annotations

import os
import pwd

import pytest

from gpufleet.agent.lookups import Lookups
from gpufleet.api.schemas import AccountAnswers, AgentCommand

ME = pwd.getpwuid(os.geteuid())
NOBODY_HERE = "gf-no-such-user-x"


class Controller:
    def __init__(self, fail: int = 0) -> None:
        self.got: list[dict[str, int | None]] = []
        self.fail = fail

    def accounts(self, node: str, answers: AccountAnswers) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("the controller is away")
        self.got.append(dict(answers.answers))


def ask(*users: str) -> AgentCommand:
    return AgentCommand(kind="accounts", job="", attempt=0, rank=0, users=list(users))


def test_accounts_commands_are_answered_and_the_others_go_on() -> None:
    ctl, kill = Controller(), AgentCommand(kind="kill", job="1", attempt=1, rank=0)
    rest = Lookups().answer(ctl, "n1", [ask(ME.pw_name, NOBODY_HERE), kill])
    assert rest == [kill]
    assert ctl.got == [{ME.pw_name: ME.pw_uid, NOBODY_HERE: None}]


def test_an_answer_that_did_not_reach_the_controller_goes_again() -> None:
    ctl, lookups = Controller(fail=1), Lookups()
    with pytest.raises(ConnectionError):
        lookups.answer(ctl, "n1", [ask(NOBODY_HERE)])
    assert lookups.answer(ctl, "n1", []) == []
    assert ctl.got == [{NOBODY_HERE: None}]
