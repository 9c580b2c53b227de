"""``squeue -u`` as Slurm 22.05 answers it: another user's jobs under gpufleet's privacy (a
user's token sees only that user's jobs, as Slurm's PrivateData=jobs), and a name of no user.

What a real Slurm 22.05 printed (``/work/shared/tools/slurm_local.sh``, PrivateData=none, as
root with a job of root's running; the last test runs it again where Slurm is installed)::

    squeue -u nosuchuser                 exit 0; the header alone; on stderr (the message ends
                                         with a newline of its own: a blank line follows)
                                           squeue: error: Invalid user: nosuchuser
    squeue -u 54321                      the same for 54321 (a uid of no account)
    squeue -u nobody                     exit 0; the header alone (a user, no jobs)
    squeue -u 0                          exit 0; root's job (a uid is its account)
    squeue -u root,nosuchuser            exit 0; root's job, and the error for nosuchuser

Under PrivateData=jobs a user's squeue shows no job of another user: the header alone, exit 0.
gpufleet's users need no Unix account (a job's user is a name), so a name no account has is a
user when a job of it is one the asker may see: an admin's ``-u bob`` lists bob's jobs; to
alice's token bob is no one she can tell from a name of no user (his jobs are hidden), and she
gets Slurm's words for that, exactly as for a name nobody has."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_api import SPEC, T0, Api, register, serve

from gpufleet.base.clock import ManualClock
from gpufleet.server.store import Store
from support.slurm_local import live

HEADER = "NAME USER\n"
FMT = ["-o", "%j %u"]
# the shim's own path (over GET /jobs: an older controller's way, or a format of local times)
HERE = (
    "import sys; from gpufleet.shims import squeue; from gpufleet.shims.common import connect, "
    "run; run('squeue', lambda: squeue._listed_here(connect('squeue'), sys.argv[1:]))"
)


def invalid(*names: str) -> str:
    return "".join(f"squeue: error: Invalid user: {n}\n\n" for n in names)


# (who, -u's argument, exit status, stdout, stderr); alice: a user's token, with a job of hers;
# nobody: an account on this host, with a job; bob: no account, with a job; nosuch: neither
CASES = [
    ("alice", None, 0, HEADER + "mine alice\n", ""),
    ("alice", "nobody", 0, HEADER, ""),  # Slurm's PrivateData=jobs: none shown, no error
    ("alice", "65534", 0, HEADER, ""),  # nobody's uid
    ("alice", "alice,nobody", 0, HEADER + "mine alice\n", ""),
    ("alice", "bob", 0, HEADER, invalid("bob")),  # nothing tells her bob from nosuch
    ("alice", "nosuch", 0, HEADER, invalid("nosuch")),
    ("admin", "nobody", 0, HEADER + "theirs nobody\n", ""),
    ("admin", "65534", 0, HEADER + "theirs nobody\n", ""),
    ("admin", "bob", 0, HEADER + "bobs bob\n", ""),  # a user by his job
    ("admin", "nosuch,bob,54321", 0, HEADER + "bobs bob\n", invalid("nosuch", "54321")),
]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    store = Store.open(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        with serve(store, tmp_path / "controller", ManualClock(T0)) as a:
            register(a.agent("node-0"), "node-0")
            yield a
    finally:
        store.close()


def test_squeue_u_answers_as_slurm_and_hides_what_a_user_may_not_see(
    api: Api, tmp_path: Path
) -> None:
    for name in ("alice", "bob", "nosuch"):  # no account here (nobody's is everywhere)
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
    held = {**SPEC, "hold": True}  # pending until released: listed by squeue's default
    api.user("alice").submit({**held, "name": "mine"})
    api.admin.submit({**held, "name": "theirs", "user": "nobody"})
    api.admin.submit({**held, "name": "bobs", "user": "bob"})
    tokens = {"admin": (tmp_path / "controller" / "admin.token").read_text().strip(),
              "alice": api.token("user", user="alice")}  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    for who, users, rc, out, err in CASES:
        env = {**base, "GPUFLEET_SERVER": api.url, "GPUFLEET_TOKEN": tokens[who],
               "GPUFLEET_CONFIG": str(tmp_path / "none.yaml")}  # fmt: skip
        argv = [*FMT, *(["-u", users] if users else [])]
        for way in (["-m", "gpufleet.shims.squeue"], ["-c", HERE]):
            r = subprocess.run([sys.executable, *way, *argv], env=env, capture_output=True,
                               text=True, timeout=60)  # fmt: skip
            assert (r.returncode, r.stdout, r.stderr) == (rc, out, err), (who, users, way)


@live
def test_slurm_answers_as_recorded(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    env = shared_slurm

    def squeue(*argv: str) -> tuple[int, str, str]:
        r = subprocess.run(["squeue", *argv], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
        return r.returncode, r.stdout, r.stderr

    sub = ["sbatch", "--parsable", "-H", "-J", "held", "-o", "/dev/null", "--wrap", "true"]
    subprocess.run(sub, env=env, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    fmt = ["-o", "%j %u"]
    assert squeue("-u", "nosuchuser", *fmt) == (0, HEADER, invalid("nosuchuser"))
    assert squeue("-u", "54321", *fmt) == (0, HEADER, invalid("54321"))
    assert squeue("-u", "nobody", *fmt) == (0, HEADER, "")
    assert squeue("-u", "0", *fmt) == (0, HEADER + "held root\n", "")
    both = squeue("-u", "root,nosuchuser", *fmt)
    assert both == (0, HEADER + "held root\n", invalid("nosuchuser"))
