"""Secrets on disk: read only when private, written 0600 from the first byte, never through a
planted symlink; the controller's first admin token and its SQLite files are private."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.base.secretfile import SecretFileError, private_dir, read_secret, write_secret
from gpufleet.server.app import bootstrap_admin
from gpufleet.server.store import Store


def mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The loosest umask: whatever stays private here is private by construction."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_a_private_file_is_read_stripped(tmp_path: Path) -> None:
    p = tmp_path / "tok"
    p.write_text("gft_abc\n")
    p.chmod(0o600)
    assert read_secret(p) == "gft_abc"


@pytest.mark.parametrize("bits", [0o640, 0o604, 0o620, 0o644])
def test_a_file_others_may_read_is_refused_as_ssh_does(tmp_path: Path, bits: int) -> None:
    p = tmp_path / "tok"
    p.write_text("gft_abc\n")
    p.chmod(bits)
    with pytest.raises(SecretFileError, match=rf"permissions {bits:04o} are too open.*chmod 600"):
        read_secret(p)


@pytest.mark.parametrize(
    ("content", "why"), [("", "it is empty"), ("\n \n", "it is empty"), ("a\nb\n", "one line")]
)
def test_empty_or_multi_line_files_are_refused(tmp_path: Path, content: str, why: str) -> None:
    p = tmp_path / "tok"
    p.write_text(content)
    p.chmod(0o600)
    with pytest.raises(SecretFileError, match=why):
        read_secret(p)


def test_a_missing_file_or_a_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(SecretFileError, match=f"token file {tmp_path / 'nope'}: no such file"):
        read_secret(tmp_path / "nope")
    with pytest.raises(SecretFileError, match="not a regular file"):
        read_secret(tmp_path)


def test_written_secrets_are_0600_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    a = write_secret(tmp_path / "a", "one")
    b = write_secret(tmp_path / "b", "two", replace=True)
    assert (mode(a), mode(b)) == (0o600, 0o600)
    assert read_secret(a) == "one" and read_secret(b) == "two"


def test_an_exclusive_write_refuses_an_existing_file(tmp_path: Path) -> None:
    p = tmp_path / "a"
    p.write_text("keep")
    with pytest.raises(SecretFileError, match="exists"):
        write_secret(p, "new")
    assert p.read_text() == "keep"


def test_replace_renames_over_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "a"
    p.write_text("old")
    p.chmod(0o644)
    write_secret(p, "new", replace=True)
    assert p.read_text() == "new\n" and mode(p) == 0o600
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a"]


def test_the_admin_token_never_goes_through_a_planted_symlink(tmp_path: Path) -> None:
    """Another user who could write the data dir plants ``admin.token -> their file``: the
    secret must not land in their file (writing, then chmod, followed the link)."""
    data = private_dir(tmp_path / "data")
    trap = tmp_path / "trap"
    trap.write_text("")
    trap.chmod(0o666)
    (data / "admin.token").symlink_to(trap)
    store = Store.open(f"sqlite:///{data / 'gpufleet.db'}")
    try:
        path = bootstrap_admin(store, data, 0.0)
        assert path == data / "admin.token"
        assert trap.read_text() == "" and mode(trap) == 0o666
        assert not path.is_symlink() and mode(path) == 0o600
        info = store.verify_token(read_secret(path))
        assert info is not None and info.role == "admin"
    finally:
        store.close()


def test_the_sqlite_files_and_data_dir_are_private_whatever_the_umask(
    tmp_path: Path, open_umask: None
) -> None:
    data = private_dir(tmp_path / "data")
    store = Store.open(f"sqlite:///{data / 'gpufleet.db'}")
    try:
        store.create_token("t", "admin", None, None, 0.0)  # a write: -wal and -shm exist now
        files = sorted(p.name for p in data.iterdir())
        assert files == ["gpufleet.db", "gpufleet.db-shm", "gpufleet.db-wal"]
        assert {p.name: mode(p) for p in data.iterdir()} == dict.fromkeys(files, 0o600)
    finally:
        store.close()
    assert mode(data) == 0o700


def test_an_existing_data_dir_is_tightened(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    d.chmod(0o755)
    private_dir(d)
    assert mode(d) == 0o700
