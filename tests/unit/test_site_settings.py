"""A host's /etc/gpufleet/client.yaml (written by ``gpufleet setup``): the controller every
user's gpufleet and Slurm commands talk to, under each user's own settings; never a token."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.base.settings import SettingsError, resolve


def _env(tmp_path: Path, site: str | None, user: str | None = None) -> dict[str, str]:
    env = {"GPUFLEET_CONFIG": str(tmp_path / "user.yaml")}
    env["GPUFLEET_SITE_CONFIG"] = str(tmp_path / "client.yaml")
    if site is not None:
        (tmp_path / "client.yaml").write_text(site)
    if user is not None:
        (tmp_path / "user.yaml").write_text(user)
        (tmp_path / "user.yaml").chmod(0o600)
    return env


def test_the_host_s_server_and_ca_when_the_user_gives_none(tmp_path: Path) -> None:
    env = _env(tmp_path, "server: ctl-1:8600\nca: /etc/gpufleet/ca.pem\n")
    s = resolve(env=env)
    assert (s.server, s.ca, s.token) == ("http://ctl-1:8600", "/etc/gpufleet/ca.pem", None)


def test_the_user_s_own_settings_win(tmp_path: Path) -> None:
    env = _env(tmp_path, "server: http://ctl-1:8600\nca: /site.pem\n", "server: http://mine:1\n")
    s = resolve(env=env)
    assert (s.server, s.ca) == ("http://mine:1", "/site.pem")
    env["GPUFLEET_SERVER"] = "http://env:2"
    assert resolve(env=env).server == "http://env:2"
    assert resolve("http://flag:3", env=env).server == "http://flag:3"


def test_a_token_in_the_host_s_file_is_refused(tmp_path: Path) -> None:
    env = _env(tmp_path, "server: http://ctl-1:8600\ntoken: gft_everyones\n")
    with pytest.raises(SettingsError) as e:
        resolve(env=env)
    assert "expected only server: and ca:" in e.value.message
    assert e.value.hint is not None and "each user's own" in e.value.hint


def test_without_any_the_hint_names_the_host_s_file_too(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as e:
        resolve(env=_env(tmp_path, None))
    assert "no gpufleet server is configured" in e.value.message
    assert e.value.hint is not None and "/etc/gpufleet/client.yaml" in e.value.hint
