"""Real faults for the chaos tests: a PostgreSQL server of the test's own (its port, its data
directory) that can be stopped mid-burst, a small tmpfs to fill, a burst of submissions that
retries as a client should, and the audit of what ran, by the agents' own records."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpufleet.client import ApiError, Client
from gpufleet.ops.hacluster import HaCluster
from gpufleet.ops.localcluster import LocalCluster, free_port
from gpufleet.server.store import Store
from realparts import missing

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}


def tail(path: Path, n: int = 30) -> str:
    """The last ``n`` lines of a log, or ``(none)``."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


def stop_ha_clusters(made: list[HaCluster], failed: bool, agents: bool = False) -> None:
    """Stop each HaCluster a fixture started; after a failed test print its controllers' logs
    (and its agents' with ``agents``) first."""
    for c in made:
        if failed:
            for i in range(c.controllers):
                print(f"\n--- controller {i}\n{tail(c.data_dir / f'controller{i}.log')}")
            if agents:
                for name in c.agent_procs:
                    print(f"--- {name}\n{tail(c.data_dir / f'{name}.log', 15)}")
        c.stop()


def need_root() -> None:
    if os.geteuid() != 0:
        missing("needs root (mounts a tmpfs, runs PostgreSQL as the postgres user)")


# ----- PostgreSQL ------------------------------------------------------------------------


def pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return found[-1].parent if found else None


class PgServer:
    """initdb + pg_ctl as the ``postgres`` user (PostgreSQL refuses root), on a free port, in
    a directory of its own under /tmp (pytest's tmp dirs are root's, mode 0700)."""

    def __init__(self, also_on: str = "") -> None:
        """``also_on``: an address of this host's to listen on too (the bridge of a test's
        network namespaces, whose hosts it then trusts as it trusts 127.0.0.1)."""
        b = pg_bin()
        if b is None:
            missing("no PostgreSQL binaries in /usr/lib/postgresql/*/bin")
        assert b is not None
        self.bin = b
        self.base = Path(tempfile.mkdtemp(prefix="gf-chaos-pg-"))
        self.data = self.base / "data"
        self.port = free_port()
        shutil.chown(self.base, "postgres", "postgres")
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        self.listen = ",".join(["127.0.0.1", *([also_on] if also_on else [])])
        if also_on:  # the subnets this server is on: the namespaces behind the bridge
            with (self.data / "pg_hba.conf").open("a") as f:
                f.write("host all all samenet trust\n")

    @property
    def url(self) -> str:
        return self.url_at("127.0.0.1")

    def url_at(self, address: str) -> str:
        return f"postgresql+psycopg://postgres@{address}:{self.port}/postgres"

    def _pg(self, tool: str, *args: str) -> None:
        cmd = ["runuser", "-u", "postgres", "--", str(self.bin / tool), *args]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.base} -c listen_addresses={self.listen}"
        self._pg("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.base / "log"), "-w",
                 "start")  # fmt: skip

    def stop(self, mode: str = "immediate") -> None:
        """``immediate``: as a crash does, without a checkpoint, cutting every connection."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


# ----- a small disk ----------------------------------------------------------------------


class Tmpfs:
    def __init__(self, where: Path, size_mib: int) -> None:
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", "tmpfs", str(where)],
            check=True,
            capture_output=True,
        )
        self.where = where
        self.filler = where / "filler"

    def fill(self) -> int:
        """Write until ENOSPC; the bytes written."""
        n = 0
        with self.filler.open("ab", buffering=0) as f:  # unbuffered: nothing left to flush
            for size in (1 << 20, 4096, 512):  # down to the last partial blocks
                with contextlib.suppress(OSError):
                    while True:
                        n += f.write(b"\0" * size)
        return n

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.where)], check=False, capture_output=True)


# ----- the burst -------------------------------------------------------------------------


def spec(i: int, prefix: str) -> dict[str, Any]:
    """A short job that says when it starts and when it finished, on its own stdout: the
    agent's per-attempt log is the record of what ran (<job>/<attempt>/rank0.out)."""
    return {
        "name": f"{prefix}{i}",
        "gpus_per_worker": 1,
        "gpu_milli": 250,
        "cpus": 0.1,
        "memory_gib": 0.1,
        "command": ["/bin/sh", "-c", "echo start; sleep 0.3; echo done"],
    }


@dataclass
class Burst:
    """``n`` submissions from ``threads`` clients, each retried (same idempotency key) on a
    503 or a lost connection until accepted, as a client should."""

    url: str
    token: str
    n: int
    prefix: str
    threads: int = 4
    accepted: dict[str, str] = field(default_factory=dict)  # key → id the client got back
    accepted_at: dict[str, float] = field(default_factory=dict)  # key → monotonic time
    statuses: Counter[str] = field(default_factory=Counter)  # what the retries met
    errors: list[BaseException] = field(default_factory=list)
    pause: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def key(self, i: int) -> str:
        return f"{self.prefix}-{i}"

    def start(self) -> Burst:
        self.pause.set()  # set: go on
        for k in range(self.threads):
            t = threading.Thread(target=self._run, args=(range(k, self.n, self.threads),))
            t.start()
            self._threads.append(t)
        return self

    def _run(self, mine: range) -> None:
        cl = Client(self.url, self.token, timeout=30)
        try:
            for i in mine:
                deadline = time.monotonic() + 240
                while True:
                    self.pause.wait()
                    try:
                        (jid,) = cl.submit(spec(i, self.prefix), idempotency_key=self.key(i))
                        break
                    except (httpx.TransportError, ApiError) as e:
                        what = f"{e.status}" if isinstance(e, ApiError) else type(e).__name__
                        with self._lock:
                            self.statuses[what] += 1
                        if isinstance(e, ApiError) and e.status != 503:
                            raise  # a 500, or a refusal: the test fails on it
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
                with self._lock:
                    self.accepted[self.key(i)] = jid
                    self.accepted_at[self.key(i)] = time.monotonic()
        except BaseException as e:
            self.errors.append(e)
        finally:
            cl.close()

    def wait_accepted(self, k: int, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while len(self.accepted) < k:
            assert not self.errors, self.errors
            assert time.monotonic() < end, f"only {len(self.accepted)} of {k} accepted"
            time.sleep(0.05)

    def join(self, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.1, end - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "submitters still running"
        assert not self.errors, self.errors

    def first_accepted_after(self, t: float) -> float | None:
        later = [a for a in self.accepted_at.values() if a >= t]
        return min(later) - t if later else None


# ----- what ran --------------------------------------------------------------------------


@dataclass
class Figures:
    scenario: str
    accepted: int
    stored: int
    ran_twice: int  # (job, attempt) started more than once, on one node or on two
    succeeded_twice: int  # jobs with more than one attempt that ran to its end
    stuck: int  # jobs not ended, or GPUs held, once the cluster settled
    recover_s: float | None
    retries: dict[str, int]

    def line(self) -> str:
        rec = "-" if self.recover_s is None else f"{self.recover_s:.1f}"
        return (
            f"CHAOS {self.scenario}: accepted {self.accepted}, stored {self.stored}, "
            f"ran twice {self.ran_twice}, succeeded twice {self.succeeded_twice}, "
            f"stuck {self.stuck}, recovered in {rec} s, retries {self.retries}"
        )


def runs(c: LocalCluster) -> dict[tuple[str, str], list[list[str]]]:
    """(job, attempt) → the stdout lines of each node's run of rank 0, from the agents'
    per-attempt directories."""
    out: dict[tuple[str, str], list[list[str]]] = {}
    for node in c.agent_procs:
        for f in (c.data_dir / node).glob("*/*/rank0.out"):
            key = (f.parent.parent.name, f.parent.name)
            out.setdefault(key, []).append(f.read_text().splitlines())
    return out


def settle_and_audit(
    c: LocalCluster, db_url: str, burst: Burst, scenario: str, recover_s: float | None
) -> Figures:
    """Wait until every burst job ended, then check, by the store and the agents' records:
    every accepted job exists once, under its id; no attempt ran twice; every job succeeded
    exactly once, in the attempt the store names; nothing is left STARTING or holding GPUs."""
    with Store.open(db_url, migrate=False) as store:

        def mine() -> list[Any]:
            return [j for j in store.list_jobs(limit=None) if j.spec.name.startswith(burst.prefix)]

        end = time.monotonic() + 240
        while any(j.state.value not in TERMINAL for j in mine()):
            assert time.monotonic() < end, Counter(j.state.value for j in mine())
            time.sleep(1.0)
        final = mine()
    by_key = Counter(j.idempotency_key for j in final)
    ran = runs(c)
    twice = [k for k, rs in ran.items() if len(rs) > 1 or any(r.count("start") > 1 for r in rs)]
    finished = Counter(job for (job, _), rs in ran.items() if any("done" in r for r in rs))
    with c.admin() as a:
        held = [n.name for n in a.nodes() if n.gpus_free != n.gpus]
    fig = Figures(
        scenario,
        accepted=len(burst.accepted),
        stored=len(final),
        ran_twice=len(twice),
        succeeded_twice=sum(1 for n in finished.values() if n > 1),
        stuck=sum(1 for j in final if j.state.value != "SUCCEEDED") + len(held),
        recover_s=recover_s,
        retries=dict(burst.statuses),
    )
    print(fig.line())
    assert len(burst.accepted) == burst.n
    assert len(final) == burst.n and max(by_key.values()) == 1, by_key.most_common(3)
    assert {j.idempotency_key: j.id for j in final} == burst.accepted
    assert not twice, twice[:5]
    assert fig.succeeded_twice == 0, [j for j, n in finished.items() if n > 1][:5]
    assert Counter(j.state.value for j in final) == {"SUCCEEDED": burst.n}
    for j in final:  # the attempt the store says succeeded is the one that ran to its end
        assert any("done" in r for r in ran.get((j.id, str(j.attempt)), [])), (j.id, j.attempt)
    assert not held, f"GPUs held on {held} with every job ended"
    return fig
