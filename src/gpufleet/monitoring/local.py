"""A real Prometheus server on 127.0.0.1 that scrapes one controller with the package's rules:
for tests, the demo, or a first look without setting Prometheus up. Needs the ``prometheus``
binary (Debian: ``apt-get install prometheus``)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from gpufleet.base.secretfile import write_secret
from gpufleet.client.httpx_transport import trusts_no_one
from gpufleet.monitoring import RULES, prometheus_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalPrometheus:
    """``prometheus`` scraping ``target`` (host:port) every ``interval_s``, rules evaluated as
    often, its data in ``data_dir``; with ``nodes``, each node's GPU series as a target of its
    own (``instance`` = the node). ``token``: the controller's metrics token (None: its
    /metrics is public), given to Prometheus as a file. ``stop()`` (or the context manager)
    ends it."""

    def __init__(
        self,
        data_dir: Path,
        target: str,
        *,
        token: str | None = None,
        interval_s: float = 1.0,
        rules: Path | None = RULES,
        binary: str | None = None,
        nodes: Sequence[str] | None = None,
    ) -> None:
        exe = binary or shutil.which("prometheus")
        if exe is None:
            raise FileNotFoundError(
                "prometheus is not installed (Debian: apt-get install prometheus)"
            )
        data_dir.mkdir(parents=True, exist_ok=True)
        # the metrics token in a 0600 file, as on a real Prometheus host; Prometheus reads it
        # at each scrape, so set_token may change it
        self.token_file = data_dir / "metrics.token"
        token_file = None
        if token is not None:
            token_file = write_secret(self.token_file, token, replace=True)
        cfg = data_dir / "prometheus.yml"
        cfg.write_text(
            prometheus_config(
                target,
                rules=rules,
                scrape_interval_s=interval_s,
                evaluation_interval_s=interval_s,
                token_file=token_file,
                nodes=nodes,
            )
        )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                exe,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={data_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def set_token(self, token: str) -> None:
        """The metrics token from the next scrape on (the controller's may not exist when
        Prometheus starts; give it a placeholder ``token`` then)."""
        write_secret(self.token_file, token, replace=True)

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited: {self.log.read_text()[-3000:]}")

    def api(self, path: str, **params: str) -> Any:
        """``/api/v1/<path>``'s data; an HTTP error (a bad query: 400) raises."""
        self._alive()
        # a plain-http Prometheus polled by tests: no trusted CAs loaded per call (28 → 2 ms)
        r = httpx.get(
            self.url + "/api/v1/" + path, params=params, timeout=10, verify=trusts_no_one()
        )
        r.raise_for_status()
        return r.json()["data"]

    def ready(self) -> bool:
        self._alive()
        try:
            return (
                httpx.get(self.url + "/-/ready", timeout=2, verify=trusts_no_one()).status_code
                == 200
            )
        except httpx.HTTPError:
            return False

    def targets_up(self) -> list[dict[str, Any]]:
        return [t for t in self.api("targets")["activeTargets"] if t["health"] == "up"]

    def firing(self) -> dict[str, list[dict[str, str]]]:
        """Alert name → the label sets of its firing alerts."""
        out: dict[str, list[dict[str, str]]] = {}
        for a in self.api("alerts")["alerts"]:
            if a["state"] == "firing":
                out.setdefault(a["labels"]["alertname"], []).append(a["labels"])
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def __enter__(self) -> LocalPrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
