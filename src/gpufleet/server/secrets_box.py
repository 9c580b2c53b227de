"""Secrets at rest: each value sealed with AES-256-GCM under the controller's key.

A fresh random 96-bit nonce per value (never reused under one key: 2^32 values keep the chance
of a collision far below NIST's bound). The associated data binds the ciphertext to its scope,
owner and name, so a row copied to another name, user or queue does not decrypt. The key id
(the first 16 hex digits of the key's SHA-256) is stored with each row: a controller given
another key says so instead of "tampered", and it leaves room for key rotation later.

The key is 32 random bytes, kept base64 on one line: in a file only its owner may read
(``secretfile.read_secret`` refuses a looser one, as ssh does), or in the environment
variable ``GPUFLEET_SECRETS_KEY``. Without either the controller makes ``secrets.key`` in its
data directory on first start (0600 from its creation)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gpufleet.base.secretfile import SecretFileError, read_secret, write_secret

log = logging.getLogger("gpufleet.controller")

KEY_BYTES = 32
NONCE_BYTES = 12
KEY_ENV = "GPUFLEET_SECRETS_KEY"
KEY_FILE = "secrets.key"  # in the data directory, when no key is given
_AAD = b"gpufleet-secret/v1"


class SecretKeyError(ValueError):
    """The controller's secrets key is missing, malformed or readable by others."""


class DecryptError(ValueError):
    """A stored value that does not decrypt: another key, or a row that was altered or moved."""


@dataclass(frozen=True, slots=True)
class Sealed:
    key_id: str
    nonce: bytes
    ciphertext: bytes  # with GCM's 16-byte tag at its end


def aad(scope: str, owner: str, name: str) -> bytes:
    """What a value is bound to: NUL can be in none of the three, so no two triples collide."""
    return b"\0".join((_AAD, scope.encode(), owner.encode(), name.encode()))


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:16]


def new_key_text() -> str:
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def parse_key(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip().encode(), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise SecretKeyError(f"{where}: not base64 text") from None
    if len(key) != KEY_BYTES:
        raise SecretKeyError(f"{where}: need {KEY_BYTES} bytes (base64), got {len(key)}")
    return key


class SecretBox:
    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise SecretKeyError(f"a secrets key has {KEY_BYTES} bytes, got {len(key)}")
        self._aead = AESGCM(key)
        self._key = key
        self.key_id = key_id(key)

    def __repr__(self) -> str:  # never the key
        return f"SecretBox(key_id={self.key_id!r})"

    def seal(self, value: str, scope: str, owner: str, name: str) -> Sealed:
        nonce = os.urandom(NONCE_BYTES)
        ct = self._aead.encrypt(nonce, value.encode(), aad(scope, owner, name))
        return Sealed(self.key_id, nonce, ct)

    def derive(self, label: str) -> bytes:
        """A key for another use, the same on every controller that has this box's key (a
        standby that takes over derives what the leader did): HMAC-SHA256 over ``label``."""
        return hmac.new(self._key, f"gpufleet derive\0{label}".encode(), hashlib.sha256).digest()

    def open(self, sealed: Sealed, scope: str, owner: str, name: str) -> str:
        what = f"secret {name!r} ({describe(scope, owner)})"
        if sealed.key_id != self.key_id:
            raise DecryptError(
                f"{what} was encrypted with key {sealed.key_id}; this controller has key "
                f"{self.key_id} (give it the key the secret was made with)"
            )
        try:
            plain = self._aead.decrypt(sealed.nonce, sealed.ciphertext, aad(scope, owner, name))
        except InvalidTag:
            raise DecryptError(f"{what} does not decrypt: its stored row was altered") from None
        return plain.decode()


def describe(scope: str, owner: str) -> str:
    if scope == "user":
        return f"user {owner}'s"
    if scope == "queue":
        return f"queue {owner}'s"
    return "the cluster's"


def load_box(key_file: Path | None, data_dir: Path, env: Mapping[str, str]) -> SecretBox:
    """The controller's box: from ``key_file`` (config), else ``$GPUFLEET_SECRETS_KEY``, else
    ``data_dir/secrets.key`` (made on first start). A key file others may read is refused."""
    if key_file is not None:
        return SecretBox(parse_key(_read(key_file), f"secrets key file {key_file}"))
    if env.get(KEY_ENV):
        return SecretBox(parse_key(env[KEY_ENV], f"${KEY_ENV}"))
    path = data_dir / KEY_FILE
    if not path.exists():
        write_secret(path, new_key_text())
        log.warning("created the secrets key in %s (keep a copy: without it no secret opens)", path)
    return SecretBox(parse_key(_read(path), f"secrets key file {path}"))


def _read(path: Path) -> str:
    try:
        return read_secret(path, "secrets key")
    except SecretFileError as e:
        raise SecretKeyError(str(e)) from None
