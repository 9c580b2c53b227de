"""The controller's /metrics options: ``--metrics-public`` opens it (and drops the user labels),
``--metrics-user-labels`` keeps them and means nothing without it, so it is refused alone; and
``python -m gpufleet.monitoring`` writes a scrape config that reads the token from a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.monitoring import DEFAULT_TOKEN_FILE, prometheus_config
from gpufleet.monitoring.__main__ import main


def test_user_labels_without_a_public_metrics_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    res = CliRunner().invoke(
        app, ["controller", "--data-dir", str(tmp_path / "c"), "--metrics-user-labels"]
    )
    assert res.exit_code == 2, res.output
    assert "--metrics-user-labels is for --metrics-public" in res.output
    assert not (tmp_path / "c").exists()


def test_the_controllers_help_names_both_options() -> None:
    res = CliRunner().invoke(app, ["controller", "--help"], terminal_width=200)
    assert "--metrics-public" in res.output and "--metrics-user-labels" in res.output


def test_the_scrape_config_reads_the_token_from_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    text = prometheus_config("ctl:8600")
    assert f"credentials_file: {DEFAULT_TOKEN_FILE!r}" in text and "credentials:" not in text
    assert "authorization" not in prometheus_config("ctl:8600", token_file=None)
    assert main(["ctl:8600", "/etc/p/t"]) == 0
    out = capsys.readouterr().out
    assert "--role metrics --out /etc/p/t" in out and "credentials_file: '/etc/p/t'" in out
