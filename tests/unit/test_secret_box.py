"""Secrets at rest (server/secrets_box.py): AES-GCM with a fresh nonce per value, bound to its
scope, owner and name; a wrong key, an altered row or a row moved to another name is refused."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.server.secrets_box import (
    KEY_ENV,
    DecryptError,
    SecretBox,
    SecretKeyError,
    load_box,
    new_key_text,
    parse_key,
)

KEY = bytes(range(32))


def test_a_value_round_trips_and_never_appears_in_the_ciphertext() -> None:
    box = SecretBox(KEY)
    sealed = box.seal("hunter2-très-secret", "user", "alice", "API_KEY")
    assert b"hunter2" not in sealed.ciphertext and len(sealed.nonce) == 12
    assert box.open(sealed, "user", "alice", "API_KEY") == "hunter2-très-secret"
    again = box.seal("hunter2-très-secret", "user", "alice", "API_KEY")
    assert again.nonce != sealed.nonce and again.ciphertext != sealed.ciphertext
    assert "0001" not in repr(box) and box.key_id in repr(box)


def test_a_tampered_row_is_refused() -> None:
    box = SecretBox(KEY)
    sealed = box.seal("value", "cluster", "", "TOKEN")
    flipped = bytes([sealed.ciphertext[0] ^ 1]) + sealed.ciphertext[1:]
    for bad in (
        replace(sealed, ciphertext=flipped),
        replace(sealed, ciphertext=sealed.ciphertext[:-1]),
        replace(sealed, nonce=bytes(12)),
    ):
        with pytest.raises(DecryptError, match="altered"):
            box.open(bad, "cluster", "", "TOKEN")


@pytest.mark.parametrize(
    ("scope", "owner", "name"),
    [("user", "bob", "API_KEY"), ("user", "alice", "OTHER"), ("queue", "alice", "API_KEY")],
)
def test_a_row_moved_to_another_scope_owner_or_name_does_not_open(
    scope: str, owner: str, name: str
) -> None:
    box = SecretBox(KEY)
    sealed = box.seal("value", "user", "alice", "API_KEY")
    with pytest.raises(DecryptError, match="altered"):
        box.open(sealed, scope, owner, name)


def test_the_wrong_key_is_refused_saying_which() -> None:
    sealed = SecretBox(KEY).seal("value", "user", "alice", "K")
    other = SecretBox(bytes(32))
    with pytest.raises(DecryptError, match=f"encrypted with key {sealed.key_id}"):
        other.open(sealed, "user", "alice", "K")
    # even with the key id forged to match, the tag refuses it
    with pytest.raises(DecryptError, match="altered"):
        other.open(replace(sealed, key_id=other.key_id), "user", "alice", "K")


def test_keys_must_be_32_bytes_of_base64() -> None:
    assert len(parse_key(new_key_text(), "k")) == 32
    with pytest.raises(SecretKeyError, match="need 32 bytes"):
        parse_key("c2hvcnQ=", "k")
    with pytest.raises(SecretKeyError, match="not base64"):
        parse_key("!!!", "k")


def test_the_key_comes_from_the_file_then_the_environment_then_the_data_dir(
    tmp_path: Path,
) -> None:
    made = load_box(None, tmp_path, {})  # first start: made, 0600
    path = tmp_path / "secrets.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_box(None, tmp_path, {}).key_id == made.key_id  # the same one next time
    text = new_key_text()
    from_env = load_box(None, tmp_path, {KEY_ENV: text})
    assert from_env.key_id == SecretBox(parse_key(text, "")).key_id != made.key_id
    own = tmp_path / "own.key"
    own.write_text(text + "\n")
    own.chmod(0o600)
    assert load_box(own, tmp_path, {KEY_ENV: new_key_text()}).key_id == from_env.key_id


def test_a_key_file_others_may_read_is_refused_saying_so(tmp_path: Path) -> None:
    own = tmp_path / "own.key"
    own.write_text(new_key_text())
    os.chmod(own, 0o644)
    with pytest.raises(SecretKeyError, match=r"too open.*chmod 600"):
        load_box(own, tmp_path, {})
    (tmp_path / "secrets.key").write_text(new_key_text())
    os.chmod(tmp_path / "secrets.key", 0o640)
    with pytest.raises(SecretKeyError, match="too open"):
        load_box(None, tmp_path, {})
