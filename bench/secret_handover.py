"""What job secrets cost the controller (issue 13): sealing and opening one value
(AES-256-GCM, ``server/secrets_box.py``), and handing over N launches that carry K secrets
each (``SecretService.hand_over``: one store read per secret, one commit for the audit entries
and last-use times) on a real SQLite store, against the same launches without secrets.

    .venv/bin/python bench/secret_handover.py [--launches 200] [--secrets 2] [--repeat 5]

Prints one JSON document; each figure is the best of ``--repeat`` runs."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.server.auth import Principal
from gpufleet.server.secrets import SecretService
from gpufleet.server.secrets_box import SecretBox
from gpufleet.server.store import Store


def _best(f: object, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()  # type: ignore[operator]
        out.append(time.perf_counter() - t)
    return min(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--secrets", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    box = SecretBox(os.urandom(32))
    n_seal = 10_000
    value = "x" * 64
    seal_s = _best(lambda: [box.seal(value, "user", "u", "k") for _ in range(n_seal)], a.repeat)
    sealed = box.seal(value, "user", "u", "k")
    open_s = _best(lambda: [box.open(sealed, "user", "u", "k") for _ in range(n_seal)], a.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'gpufleet.db'}")
        svc = SecretService(store, box, ManualClock(1.7e9))
        who = Principal("alice-token", "user", user="alice")
        for k in range(a.secrets):
            svc.create(who, "user", "alice", f"k{k}", value, replace=False)
        refs = [
            s.TaskSecret(name=f"k{k}", scope="user", owner="alice", env=f"K{k}", value="")
            for k in range(a.secrets)
        ]

        def cmds(with_secrets: bool) -> list[s.AgentCommand]:
            return [
                s.AgentCommand(
                    kind="launch",
                    job=str(i),
                    attempt=1,
                    rank=0,
                    command=["true"],
                    seq=i,
                    secrets=refs if with_secrets else [],
                )
                for i in range(a.launches)
            ]

        plain, carrying = cmds(False), cmds(True)
        users = {str(i): "alice" for i in range(a.launches)}
        bare_s = _best(lambda: svc.hand_over("n", plain, users), a.repeat)
        full_s = _best(lambda: svc.hand_over("n", carrying, users), a.repeat)
        store.close()
    print(
        json.dumps(
            {
                "seal_us": round(seal_s / n_seal * 1e6, 2),
                "open_us": round(open_s / n_seal * 1e6, 2),
                "launches": a.launches,
                "secrets_per_launch": a.secrets,
                "hand_over_without_ms": round(bare_s * 1e3, 3),
                "hand_over_with_ms": round(full_s * 1e3, 2),
                "per_launch_us": round((full_s - bare_s) / a.launches * 1e6, 1),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
