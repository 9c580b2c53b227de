"""``gpufleet secret create|ls|rm`` and ``submit --secret/--secret-file`` against a fake API:
the value goes in the request body, read from stdin or a file, never from the command line,
and nothing printed holds it."""

from __future__ import annotations

from pathlib import Path

import httpx
from test_cli_support import NOW, FakeApi, Run, api, cli
from typer.testing import CliRunner

from gpufleet.cli.main import app

__all__ = ["api"]  # the fixture, imported for pytest
VALUE = "hunter2-value"
ENV = {
    "GPUFLEET_SERVER": "http://fleet.test:8080",
    "GPUFLEET_TOKEN": "tok-ana",
    "GPUFLEET_CONFIG": "/nonexistent/gpufleet.yaml",
    "COLUMNS": "200",
}


def run(*args: str, stdin: str) -> Run:
    r = CliRunner(env=ENV).invoke(app, list(args), input=stdin, catch_exceptions=False)
    return Run(r.exit_code, r.stdout, r.stderr)


def out(name: str = "api-key", scope: str = "user", owner: str = "ana") -> dict[str, object]:
    return {"name": name, "scope": scope, "owner": owner, "created_by": "ana",
            "created_time": NOW, "updated_time": NOW, "last_used_time": None}  # fmt: skip


def test_create_reads_the_value_from_stdin_less_its_newline(api: FakeApi) -> None:
    api.on("POST", "/secrets", lambda r: httpx.Response(201, json=out()))
    r = run("secret", "create", "api-key", stdin=VALUE + "\n")
    assert r.code == 0, r.stderr
    assert api.body() == {"name": "api-key", "scope": "user", "user": None, "queue": None,
                          "value": VALUE, "replace": False}  # fmt: skip
    assert VALUE not in r.stdout + r.stderr and "created" in r.stdout
    assert VALUE not in str(api.requests[-1].url)


def test_create_from_a_file_keeps_it_exactly_and_scopes_go_in_the_body(
    api: FakeApi, tmp_path: Path
) -> None:
    f = tmp_path / "cert.pem"
    f.write_text("line 1\nline 2\n")
    api.on("POST", "/secrets", lambda r: httpx.Response(201, json=out("c", "queue", "vision")))
    r = run(
        "secret", "create", "c", "--from-file", str(f), "--queue", "vision", "--update", stdin=""
    )
    assert r.code == 0, r.stderr
    body = api.body()
    assert (body["value"], body["scope"], body["queue"], body["replace"]) == (
        "line 1\nline 2\n",
        "queue",
        "vision",
        True,
    )
    assert "updated" in r.stdout


def test_bad_input_is_refused_before_anything_is_sent(api: FakeApi, tmp_path: Path) -> None:
    for args, stdin, words in (
        (("secret", "create", "k"), "", "stdin: the value is empty"),
        (("secret", "create", "../k"), VALUE, "name"),
        (("secret", "create", "k", "--queue", "q", "--cluster"), VALUE, "not both"),
        (("secret", "create", "k", "--from-file", str(tmp_path / "none")), "", "cannot read"),
    ):
        r = run(*args, stdin=stdin)
        assert r.code == 2 and words in r.stderr, (args, r.stderr)
        assert VALUE not in r.stderr
    assert api.requests == []


def test_ls_shows_no_value_and_rm_names_the_scope(api: FakeApi) -> None:
    api.on("GET", "/secrets", [out(), out("c-key", "cluster", "")])
    r = cli("secret", "ls")
    assert r.code == 0 and "api-key" in r.stdout and "c-key" in r.stdout and "never" in r.stdout
    api.on("DELETE", "/secrets/c-key", httpx.Response(204))
    assert cli("secret", "rm", "c-key", "--cluster").code == 0
    assert dict(api.requests[-1].url.params) == {"scope": "cluster"}
    api.on("DELETE", "/secrets/x", httpx.Response(404, json={"detail": "no such secret"}))
    r = cli("secret", "rm", "x")
    assert r.code == 1 and "gpufleet secret ls" in r.stderr


def test_submit_names_secrets_as_variables_and_files(api: FakeApi) -> None:
    api.on("POST", "/jobs", lambda r: httpx.Response(201, json={"ids": ["7"]}))
    r = cli("submit", "--secret", "api-key", "--secret", "db:DB_PASSWORD",
            "--secret-file", "cert", "--secret-file", "ca:ca.pem", "--", "true")  # fmt: skip
    assert r.code == 0, r.stderr
    assert api.body()["spec"]["secrets"] == [
        {"name": "api-key", "env": "API_KEY"},
        {"name": "db", "env": "DB_PASSWORD"},
        {"name": "cert", "file": "cert"},
        {"name": "ca", "file": "ca.pem"},
    ]
    r = cli("submit", "--secret", "k:1BAD", "--", "true")
    assert r.code == 2 and "secrets[0].env" in r.stderr
