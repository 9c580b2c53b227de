"""``gpufleet gateway``: the services' proxy as a process of its own, for controllers in high
availability (``gpufleet controller --gateway remote``; ADR 0044).

It runs the proxy (HAProxy, nginx or the built-in one, as a controller would) and follows
whichever controller leads, as agents do (``--controller URL,URL``: a standby's 503 names the
leader). Each sync (``POST /api/v1/gateway/sync``) says what it serves and its counters, and
long-polls for the routes it should serve; a new set is applied (a reload that drops no
connection) and acknowledged at the next sync, which is when the controller counts it served
(a replica leaves the routes before it is stopped). While no controller answers, the proxy
serves the routes it last had: a failover drops no request, and the new leader, which reads
the same endpoints back from the store, hands over the same set (nothing reloads) or a newer
one."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpufleet.client.http import over_httpx
from gpufleet.gateway import KINDS, Backend, Gateway, ServiceRoute, make_gateway

log = logging.getLogger("gpufleet.gateway")

SYNC_PATH = "/api/v1/gateway/sync"
WAIT_S = 2.0  # the long-poll: also how often the counters reach the controller
RETRY_S = 0.5  # after a sync that failed (no leader yet)


def _backends(x: dict[str, Any]) -> tuple[Backend, ...]:
    """A route's backends, each with its key where the controller gave one (a desktop's)."""
    keys = [str(k) for k in x.get("keys", ())]
    keys += [""] * (len(x["backends"]) - len(keys))
    return tuple(
        replace(Backend.parse(str(b)), key=k) for b, k in zip(x["backends"], keys, strict=False)
    )


class SyncError(Exception):
    pass


@dataclass
class Follower:
    """Syncs ``gateway`` with the leader; ``sync_once`` is one round."""

    transport: Any  # client.transport.Transport (a Failover over several controllers)
    gateway: Gateway
    wait_s: float = WAIT_S
    instance: str = ""  # the controller process whose routes we serve
    version: int = 0  # of that process: the newest set we got
    applied: int = 0  # of that process: the newest set the proxy serves
    serving: list[ServiceRoute] = field(default_factory=list)
    syncs: int = 0
    following: str = ""  # the controller the last sync reached (said in the log when it changes)

    def sync_once(self) -> None:
        stats = {
            name: [s.requests, s.status_4xx, s.status_5xx, s.unauthorized, s.connections]
            for name, s in self.gateway.stats().items()
        }
        body = {
            "instance": self.instance,
            "applied": self.applied,
            "known": self.version,
            "wait_s": self.wait_s,
            "stats": stats,
            "proxy": self.gateway.kind,  # a controller refuses desktops nginx cannot open
        }
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        r = self.transport.request(
            "POST", SYNC_PATH, headers, json.dumps(body).encode(), timeout=self.wait_s + 10
        )
        if r.status != 200:
            raise SyncError(f"{r.status}: {r.body[:300].decode(errors='replace')}")
        doc = json.loads(r.body)
        routes = [
            ServiceRoute(
                str(x["name"]),
                int(x["port"]),
                str(x["token"]),
                _backends(x),
                tuple(str(v) for v in x.get("viewers", ())),
            )
            for x in doc["routes"]
        ]
        self.instance, self.version = str(doc["instance"]), int(doc["version"])
        self.syncs += 1
        if routes != self.serving:
            self.gateway.apply(routes)  # ConfigError: the old set serves on, not acknowledged
            self.serving = routes
            log.info("serving %d service(s), version %d", len(routes), self.version)
        self.applied = self.version

    def _say_whom(self) -> None:
        """Which controller the syncs reach, once each time it changes: a failover the
        transport rode out within its patience raised nothing here, yet the leader changed."""
        url = str(getattr(self.transport, "current", "") or "")
        if url and url != self.following:
            self.following = url
            log.warning("following the leading controller at %s", url)

    def run(self, stop: threading.Event) -> None:
        failing = ""
        while not stop.is_set():
            try:
                self.sync_once()
                if failing:
                    log.warning("the controller answers again: following it")
                failing = ""
                self._say_whom()
            except Exception as e:  # no leader yet, httpx's errors, a refused config
                why = f"{type(e).__name__}: {e}"
                if why != failing:  # once per kind of failure, not every retry
                    log.warning("no sync with the controller (%s): serving the last routes", why)
                failing = why
                stop.wait(RETRY_S)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gpufleet gateway",
        description="Run the services' proxy as a process of its own that follows the leading "
        "controller (`gpufleet controller --gateway remote`) and serves its last routes while "
        "none answers.",
    )
    p.add_argument(
        "--controller",
        default=os.environ.get("GPUFLEET_SERVER", ""),
        help="the controllers, URL[,URL…] (default $GPUFLEET_SERVER)",
    )
    p.add_argument("--token-file", type=Path, required=True, help="an admin token's file")
    p.add_argument("--kind", choices=KINDS, help="the proxy (default: the first installed)")
    p.add_argument("--host", default="127.0.0.1", help="where the endpoints listen")
    p.add_argument(
        "--run-dir", type=Path, default=Path("gateway"), help="the proxy's pidfile is kept here"
    )
    p.add_argument("--ca", type=Path, help="the controllers' CA (https)")
    p.add_argument("--wait-s", type=float, default=WAIT_S, help="the long-poll's length")
    args = p.parse_args(argv)
    if not args.controller:
        p.error("--controller URL[,URL…] (or $GPUFLEET_SERVER) is required")
    if not 0 < args.wait_s <= 30:
        p.error(f"--wait-s {args.wait_s:g}: need more than 0 and at most 30 seconds")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per sync
    token = args.token_file.read_text().strip()
    transport = over_httpx(
        args.controller, token, ca=args.ca, transport=None, timeout=args.wait_s + 10
    )
    gateway = make_gateway(args.kind, args.host, pidfile=args.run_dir / "proxy.pid")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    gateway.start()
    log.info("%s proxy on %s: following %s", gateway.kind, args.host, args.controller)
    # the syncs on a thread of their own: a stop is not held up by a sync that waits for a
    # controller (up to the client's patience), and the proxy is stopped, never left behind
    follower = Follower(transport, gateway, wait_s=args.wait_s)
    threading.Thread(target=follower.run, args=(stop,), daemon=True, name="sync").start()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        gateway.stop()
    return 0
