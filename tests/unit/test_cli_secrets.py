"""The CLI takes its token from a private file or the environment, never from argv; ``token
create --out`` writes the secret to a new 0600 file; a CA file that cannot be loaded is named."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from test_cli_support import FakeApi, api, cli

__all__ = ["api"]  # the fixture, imported for pytest

NO_ENV_TOKEN: dict[str, str | None] = {"GPUFLEET_TOKEN": None}


def secret_file(path: Path, text: str, bits: int = 0o600) -> Path:
    path.write_text(text + "\n")
    path.chmod(bits)
    return path


def test_a_token_on_the_command_line_is_refused(api: FakeApi) -> None:
    api.on("GET", "/jobs", [])
    r = cli("jobs", "--token", "gft_secret")
    assert r.code == 2 and "--token-file" in r.stderr
    assert api.requests == []


def test_the_token_file_is_read(api: FakeApi, tmp_path: Path) -> None:
    api.on("GET", "/jobs", [])
    tok = secret_file(tmp_path / "tok", "gft_file")
    r = cli("jobs", "--token-file", str(tok), env=NO_ENV_TOKEN)
    assert r.code == 0, r.stderr
    assert api.requests[0].headers["authorization"] == "Bearer gft_file"


def test_a_token_file_others_may_read_is_refused(api: FakeApi, tmp_path: Path) -> None:
    tok = secret_file(tmp_path / "tok", "gft_file", 0o644)
    r = cli("jobs", "--token-file", str(tok))
    assert r.code == 2
    assert "permissions 0644 are too open" in r.stderr and f"chmod 600 {tok}" in r.stderr
    assert api.requests == []


def test_gpufleet_token_file_in_the_environment(api: FakeApi, tmp_path: Path) -> None:
    api.on("GET", "/jobs", [])
    tok = secret_file(tmp_path / "tok", "gft_env_file")
    r = cli("jobs", env={**NO_ENV_TOKEN, "GPUFLEET_TOKEN_FILE": str(tok)})
    assert r.code == 0, r.stderr
    assert api.requests[0].headers["authorization"] == "Bearer gft_env_file"


def test_the_config_file_may_name_a_token_file(api: FakeApi, tmp_path: Path) -> None:
    api.on("GET", "/jobs", [])
    tok = secret_file(tmp_path / "tok", "gft_cfg_file")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"server: http://fleet.test:8080\ntoken_file: {tok}\n"
    )  # 0644 is fine: no secret
    r = cli("jobs", env={**NO_ENV_TOKEN, "GPUFLEET_CONFIG": str(cfg)})
    assert r.code == 0, r.stderr
    assert api.requests[0].headers["authorization"] == "Bearer gft_cfg_file"


def test_a_config_file_holding_a_token_must_be_private(api: FakeApi, tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("server: http://fleet.test:8080\ntoken: gft_cfg\n")
    cfg.chmod(0o644)
    r = cli("jobs", env={**NO_ENV_TOKEN, "GPUFLEET_CONFIG": str(cfg)})
    assert r.code == 2 and "permissions 0644 are too open" in r.stderr
    assert api.requests == []


def test_token_create_out_writes_a_0600_file_and_prints_no_secret(
    api: FakeApi, tmp_path: Path
) -> None:
    api.on("POST", "/tokens", {"name": "n1", "role": "agent", "node": "n1", "token": "gft_new"})
    out = tmp_path / "n1.token"
    r = cli("token", "create", "n1", "--role", "agent", "--node", "n1", "--out", str(out))
    assert r.code == 0, r.stderr
    assert "gft_new" not in r.stdout + r.stderr and str(out) in r.stderr
    assert out.read_text() == "gft_new\n" and stat.S_IMODE(out.stat().st_mode) == 0o600


def test_token_create_out_with_json_leaves_the_secret_out(api: FakeApi, tmp_path: Path) -> None:
    api.on("POST", "/tokens", {"name": "a", "role": "user", "user": "ana", "token": "gft_new"})
    out = tmp_path / "a.token"
    r = cli("token", "create", "a", "--role", "user", "--user", "ana", "--out", str(out), "--json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["token"] is None and out.read_text() == "gft_new\n"


def test_token_create_out_refuses_an_existing_file_before_creating(
    api: FakeApi, tmp_path: Path
) -> None:
    out = secret_file(tmp_path / "a.token", "keep")
    r = cli("token", "create", "a", "--role", "admin", "--out", str(out))
    assert r.code == 2 and "exists" in r.stderr
    assert api.requests == [] and out.read_text() == "keep\n"


@pytest.mark.parametrize("where", ["flag", "env"])
def test_a_ca_file_that_cannot_be_loaded_is_named(where: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    if where == "flag":
        r = cli("--ca", str(missing), "jobs")
    else:
        r = cli("jobs", env={"GPUFLEET_CA": str(missing)})
    assert r.code == 2 and f"CA file {missing}: cannot load it" in r.stderr
