"""The controller's HTTPS files, checked at start so that a wrong path or a key that does not
match its certificate is one clear line, not a traceback from inside uvicorn."""

from __future__ import annotations

import ssl
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path | None = None
    key: Path | None = None

    @classmethod
    def check(cls, cert: Path | None, key: Path | None) -> TlsFiles:
        """Both or neither; readable PEM that belong together; a key only its owner may read.
        Raises ValueError naming the option."""
        if cert is None and key is None:
            return cls()
        if cert is None or key is None:
            raise ValueError("--tls-cert and --tls-key go together: give both, or neither")
        for opt, p in (("--tls-cert", cert), ("--tls-key", key)):
            if not p.is_file():
                raise ValueError(f"{opt} {p}: no such file")
        mode = stat.S_IMODE(key.stat().st_mode)
        if mode & 0o077:
            raise ValueError(
                f"--tls-key {key}: permissions {mode:04o} are too open; run: chmod 600 {key}"
            )
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(
                f"--tls-cert {cert} / --tls-key {key}: cannot load them ({e})"
            ) from None
        return cls(cert, key)

    def uvicorn_kwargs(self) -> dict[str, Any]:
        if self.cert is None:
            return {}
        return {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}
