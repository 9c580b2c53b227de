"""Which commands an agent refuses before acting on them (pure): a deposed leader's, and a
launch sent under an older registration than the agent's."""

from __future__ import annotations

import logging

from gpufleet.api.schemas import AgentCommand

log = logging.getLogger("gpufleet.agent.agent")


def refused(cmd: AgentCommand, term: int, epoch: int, registering: int) -> bool:
    """A command of a deposed leader (a lower leader's epoch ``term`` than we have seen), or a
    launch sent under an older registration (``stale``)."""
    if 0 < cmd.term < term:
        why = f"epoch {cmd.term} < {term}"
        log.warning("refusing a %s of %s from a deposed leader (%s)", cmd.kind, cmd.job, why)
        return True
    if cmd.term > term:  # a newer leader's: our registration's answer is on its way
        return False
    return cmd.kind == "launch" and stale(cmd.epoch, epoch, registering)


def stale(sent_under: int, epoch: int, registering: int) -> bool:
    """A launch sent under an older registration than ours (a long-poll answered before we
    were declared lost, read after we woke up), or under the current one while a new
    registration, which does not list it, is in flight: the controller reconciles (or
    reconciled) without it, counts it lost and may run its job elsewhere. A newer epoch's
    launch is current: that registration's answer is still on its way. 0: not said."""
    if sent_under <= 0:
        return False
    return sent_under < epoch or (registering > 0 and sent_under <= epoch)
