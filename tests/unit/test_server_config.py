"""The controller's settings refuse what a node could not use, naming the setting."""

from __future__ import annotations

import pytest

from gpufleet.server.config import ServerConfig


@pytest.mark.parametrize("name", ["-rf", "a b", "x\0y", "../etc", "a" * 40])
def test_a_fallback_account_that_is_no_unix_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="fallback_account"):
        ServerConfig(fallback_account=name)


@pytest.mark.parametrize("name", ["", "nobody", "svc_gpu", "build-bot", "ci.runner"])
def test_unix_account_names_are_accepted(name: str) -> None:
    assert ServerConfig(fallback_account=name).fallback_account == name


def test_the_gateway_settings_are_checked_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="gateway 'envoy'"):
        ServerConfig(gateway="envoy")
    with pytest.raises(ValueError, match="gateway ports"):
        ServerConfig(gateway_port_base=65000, gateway_port_span=1000)
    with pytest.raises(ValueError, match="gateway drain"):
        ServerConfig(gateway_drain_s=-1)
    assert ServerConfig(gateway="off").gateway == "off"


def test_kill_invalid_depend_reaches_the_jobmaster() -> None:
    """``--kill-invalid-depend`` (Slurm's SchedulerParameters=kill_invalid_depend, ADR 0072):
    off by default, as Slurm's; on, the core cancels a job whose dependency can never be met."""
    from gpufleet.core.controller import Controller
    from gpufleet.server.app import profile_of

    assert not Controller(profile_of(ServerConfig())).jobmaster.kill_invalid_depend
    on = profile_of(ServerConfig(kill_invalid_depend=True))
    assert on.kill_invalid_depend and Controller(on).jobmaster.kill_invalid_depend
