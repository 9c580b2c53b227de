"""The controller's gateway options: the port range as FIRST-LAST, a bad one (or a bad proxy,
drain or stats interval) refused by name before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.base.portrange import port_range


def test_a_port_range_is_its_first_port_and_how_many() -> None:
    assert port_range("31500-32499", "--gateway-ports") == (31500, 1000)
    assert port_range(" 40000 ", "--gateway-ports") == (40000, 1)


@pytest.mark.parametrize("text", ["", "a-b", "31500-", "0-10", "32499-31500", "65000-65536"])
def test_a_bad_port_range_names_the_option(text: str) -> None:
    with pytest.raises(ValueError, match=f"--gateway-ports {text!r}"):
        port_range(text, "--gateway-ports")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--gateway-ports", "9-8"], "--gateway-ports '9-8'"),
        (["--gateway", "traefik"], "gateway 'traefik'"),
        (["--gateway-drain-s", "nan"], "gateway drain nan"),
        (["--gateway-stats-s", "0"], "stats interval 0"),
    ],
)
def test_the_controller_refuses_bad_gateway_options_before_it_starts(
    tmp_path: Path, args: list[str], said: str
) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    res = CliRunner().invoke(app, ["controller", "--data-dir", str(tmp_path / "c"), *args])
    assert res.exit_code == 2, res.output
    assert said in res.output, res.output
    assert not (tmp_path / "c" / "gpufleet.db").exists()  # nothing was started
