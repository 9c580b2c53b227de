"""``--config FILE`` for the controller and the agent: a YAML file of their options, read
before the command line (which wins), every problem reported at once with its line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.agent.__main__ import parser as agent_parser
from gpufleet.base import optionfile
from gpufleet.cli.main import app
from gpufleet.cli.optionfile import click_options


def _file(tmp_path: Path, text: str, mode: int = 0o644) -> str:
    p = tmp_path / "x.yaml"
    p.write_text(text)
    p.chmod(mode)
    return str(p)


def test_the_file_s_options_come_first_and_the_typed_ones_win(tmp_path: Path) -> None:
    kinds = optionfile.argparse_options(agent_parser())
    f = _file(
        tmp_path,
        "controller: http://10.0.0.1:8600\nname: gpu-07\ndata_dir: /var/lib/a\n"
        "label: {rack: r1, row: '2'}\nfeature: [ib, nvl]\n",
    )
    words = optionfile.expand(["--config", f, "--name", "gpu-08"], kinds)
    assert words == [
        "--controller",
        "http://10.0.0.1:8600",
        "--name",
        "gpu-07",
        "--data-dir",
        "/var/lib/a",
        "--label",
        "rack=r1",
        "--label",
        "row=2",
        "--feature",
        "ib",
        "--feature",
        "nvl",
        "--name",
        "gpu-08",
    ]
    args = agent_parser().parse_args(words)
    assert (args.name, args.data_dir, dict(args.label)) == (
        "gpu-08",
        "/var/lib/a",
        {"rack": "r1", "row": "2"},
    )


def test_every_problem_at_once_with_its_line_and_a_did_you_mean(tmp_path: Path) -> None:
    kinds = {"host": "value", "port": "value", "metrics-public": "flag", "label": "multi"}
    f = _file(
        tmp_path, "hots: 0.0.0.0\nport: [1, 2]\ntoken: s3cret\nmetrics-public: 1\nconfig: x\n"
    )
    with pytest.raises(optionfile.OptionFileError) as e:
        optionfile.expand([f"--config={f}"], kinds)  # type: ignore[arg-type]
    lines = str(e.value).splitlines()
    assert lines == [
        f"{f}:1: unknown option 'hots'; did you mean 'host'?",
        f"{f}:2: port: expected one value, got a list",
        f"{f}:3: a token never goes in a config file: name a 0600 file with token-file",
        f"{f}:4: metrics-public: expected true or false, got 1",
        f"{f}:5: unknown option 'config'",
    ]
    assert "s3cret" not in str(e.value)


def test_a_flag_false_adds_nothing_and_an_empty_file_nothing(tmp_path: Path) -> None:
    kinds: dict[str, optionfile.Kind] = {"ha": "flag", "metrics-public": "flag"}
    assert optionfile.expand(
        ["--config", _file(tmp_path, "ha: true\nmetrics-public: false\n")], kinds
    ) == ["--ha"]
    assert optionfile.expand(["--config", _file(tmp_path, "# nothing yet\n")], kinds) == []
    assert optionfile.expand(["--port", "1"], kinds) == ["--port", "1"]


def test_a_file_others_may_change_is_refused_with_the_fix(tmp_path: Path) -> None:
    f = _file(tmp_path, "host: 0.0.0.0\n", mode=0o666)
    with pytest.raises(optionfile.OptionFileError, match=f"run: chmod go-w {f}"):
        optionfile.expand(["--config", f], {"host": "value"})


def test_twice_or_without_a_file_or_not_a_mapping(tmp_path: Path) -> None:
    f = _file(tmp_path, "- a\n- b\n")
    with pytest.raises(optionfile.OptionFileError, match="twice"):
        optionfile.expand(["--config", f, "--config", f], {})
    with pytest.raises(optionfile.OptionFileError, match="needs a FILE"):
        optionfile.expand(["--config"], {})
    with pytest.raises(optionfile.OptionFileError, match="expected a mapping"):
        optionfile.expand(["--config", f], {})
    with pytest.raises(optionfile.OptionFileError, match="cannot read"):
        optionfile.expand(["--config", str(tmp_path / "none.yaml")], {})
    # after --, a --config is the command's own
    assert optionfile.expand(["--", "--config", "x"], {}) == ["--", "--config", "x"]


def test_the_controller_s_options_by_kind() -> None:
    from gpufleet.cli.main import _BY_NAME

    command = _BY_NAME["controller"].build()["controller"]
    kinds = click_options(command)
    assert kinds["data-dir"] == "value" and kinds["port"] == "value"
    assert kinds["metrics-public"] == "flag" and kinds["ha"] == "flag"
    assert "config" not in kinds


def test_the_controller_refuses_a_bad_file_before_it_starts(tmp_path: Path) -> None:
    f = _file(tmp_path, "prot: 8600\nhost: [a]\n")
    result = CliRunner().invoke(app, ["controller", "--config", f])
    assert result.exit_code == 2
    assert "did you mean 'port'?" in result.output and "host: expected one value" in result.output


def test_the_agent_refuses_a_bad_file_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpufleet.agent.__main__ import main

    f = _file(tmp_path, "controler: http://x\n")
    assert main(["--config", f]) == 2
    assert "did you mean 'controller'?" in capsys.readouterr().err


def test_an_on_off_pair_gives_its_no_form_for_false(tmp_path: Path) -> None:
    # the controller's --heal/--no-heal is on by default: ``heal: false`` must turn it off, not
    # add nothing (which would leave it on)
    kinds: dict[str, optionfile.Kind] = {"heal": "switch"}
    f = _file(tmp_path, "heal: false\n")
    assert optionfile.expand(["--config", f], kinds) == ["--no-heal"]
    assert optionfile.expand(["--config", _file(tmp_path, "heal: true\n")], kinds) == ["--heal"]
    with pytest.raises(optionfile.OptionFileError, match="expected true or false"):
        optionfile.expand(["--config", _file(tmp_path, "heal: sometimes\n")], kinds)
    from gpufleet.cli.main import _BY_NAME

    assert click_options(_BY_NAME["controller"].build()["controller"])["heal"] == "switch"
