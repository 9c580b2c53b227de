"""The agent and the controller refuse secrets on their command line and take them from private
files or the environment; the controller checks its TLS files before it starts."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_support import cli

from gpufleet.agent.__main__ import agent_token
from gpufleet.agent.__main__ import main as agent_main
from gpufleet.server.store.engine import resolve_db_url, safe_url

PG = "postgresql+psycopg://gf:{pw}@127.0.0.1:5432/test"


def private(path: Path, text: str, bits: int = 0o600) -> Path:
    path.write_text(text + "\n")
    path.chmod(bits)
    return path


def agent_args(*extra: str) -> list[str]:
    return ["--controller", "http://127.0.0.1:1", "--name", "n1", "--simulate", "1xH100", *extra]


def test_the_agent_refuses_a_token_on_its_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        agent_main(agent_args("--token", "gft_secret"))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--token-file FILE" in err and "GPUFLEET_TOKEN" in err


def test_the_agent_refuses_a_token_file_others_may_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tok = private(tmp_path / "agent.token", "gft_secret", 0o644)
    assert agent_main(agent_args("--token-file", str(tok))) == 2
    assert f"permissions 0644 are too open (group or others may read it); run: chmod 600 {tok}" in (
        capsys.readouterr().err
    )


def test_the_agent_without_a_token_says_where_to_put_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GPUFLEET_TOKEN", raising=False)
    assert agent_main(agent_args()) == 2
    assert "no agent token: pass --token-file FILE (mode 0600) or set GPUFLEET_TOKEN" in (
        capsys.readouterr().err
    )


def test_the_agent_takes_its_token_out_of_the_environment_its_tasks_inherit() -> None:
    env = {"GPUFLEET_TOKEN": " gft_env \n", "PATH": "/bin"}
    assert agent_token(argparse.Namespace(token_file=None), env) == "gft_env"
    assert env == {"PATH": "/bin"}


def test_a_real_agent_process_with_an_open_token_file_exits_2_naming_it(tmp_path: Path) -> None:
    tok = private(tmp_path / "agent.token", "gft_secret", 0o640)
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet.agent", *agent_args("--token-file", str(tok))],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GPUFLEET_TOKEN": ""},
    )
    assert r.returncode == 2 and f"chmod 600 {tok}" in r.stderr


def test_db_url_precedence_and_refusals(tmp_path: Path) -> None:
    env = {"GPUFLEET_DB": PG.format(pw="from-env")}
    assert resolve_db_url("sqlite:///x.db", None, env) == "sqlite:///x.db"
    f = private(tmp_path / "db.url", PG.format(pw="from-file"))
    assert resolve_db_url("", f, env) == PG.format(pw="from-file")
    assert resolve_db_url("", None, env) == PG.format(pw="from-env")
    assert resolve_db_url("", None, {}) == ""
    with pytest.raises(ValueError, match=r"--db: the URL holds a password.*--db-file FILE"):
        resolve_db_url(PG.format(pw="argv"), None, {})
    with pytest.raises(ValueError, match="give one of them"):
        resolve_db_url("sqlite:///x.db", f, {})
    f.chmod(0o644)
    with pytest.raises(ValueError, match="permissions 0644 are too open"):
        resolve_db_url("", f, {})
    assert "from-file" not in safe_url(PG.format(pw="from-file"))


def test_the_controller_refuses_a_password_on_its_command_line(tmp_path: Path) -> None:
    data = tmp_path / "controller"
    r = cli("controller", "--data-dir", str(data), "--db", PG.format(pw="hunter2"))
    assert r.code == 2 and "--db: the URL holds a password" in r.stderr
    assert "hunter2" not in r.stderr and not data.exists()


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--tls-cert", "{d}/c.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "{d}/c.pem", "--tls-key", "{d}/k.pem"], "--tls-cert {d}/c.pem: no such"),
        (["--tls-cert", "{d}/bad.pem", "--tls-key", "{d}/bad.key"], "cannot load them"),
        (["--tls-cert", "{d}/bad.pem", "--tls-key", "{d}/open.key"], "are too open"),
    ],
)
def test_the_controller_checks_its_tls_files_first(
    tmp_path: Path, args: list[str], why: str
) -> None:
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    private(tmp_path / "bad.key", "not a key")
    private(tmp_path / "open.key", "not a key", 0o644)
    data = tmp_path / "controller"
    r = cli("controller", "--data-dir", str(data), *(a.format(d=tmp_path) for a in args))
    assert r.code == 2 and why.format(d=tmp_path) in r.stderr, r.stderr
    assert not data.exists()


def test_the_controller_refuses_a_secrets_key_file_others_may_read(tmp_path: Path) -> None:
    from gpufleet.server.secrets_box import new_key_text

    key = private(tmp_path / "secrets.key", new_key_text(), 0o640)
    r = cli("controller", "--data-dir", str(tmp_path / "data"), "--secrets-key-file", str(key))
    assert r.code == 2
    assert f"secrets key file {key}: permissions 0640 are too open" in r.stderr
    assert f"chmod 600 {key}" in r.stderr
    assert not (tmp_path / "data" / "gpufleet.db").exists()  # refused before the store opens
