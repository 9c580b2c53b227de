"""The zygote (ops/prefork.py): a forked child is what ``python -m MODULE ARGV`` would have been
(argv, environment, working directory, output, session, exit status, signals), differentially
against the same command exec'd."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.ops.prefork import Zygote

PROBE = """
    import json, os, sys, time

    def main() -> None:
        if sys.argv[1] == "sleep":
            print("sleeping", flush=True)
            time.sleep(60)
        fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
        print(json.dumps({
            "argv": sys.argv[1:], "orig": sys.orig_argv, "path0": sys.path[0],
            "name": __name__, "cwd": os.getcwd(),
            "env": os.environ.get("PROBE_VALUE"), "unset": "PROBE_UNSET" in os.environ,
            "own_session": os.getsid(0) == os.getpid(), "stdin": os.readlink("/proc/self/fd/0"),
            "fds": fds[:3], "more_fds": [f for f in fds[3:] if os.path.exists(f"/proc/self/fd/{f}")
                and not os.readlink(f"/proc/self/fd/{f}").startswith("/proc")],
        }))
        sys.exit(int(sys.argv[2]))

    if __name__ == "__main__":  # not when the zygote preloads it
        main()
"""


@pytest.fixture
def zygote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Zygote]:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "probe_mod.py").write_text(textwrap.dedent(PROBE))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    monkeypatch.setenv("PROBE_UNSET", "the asker's, not the child's")
    z = Zygote(preload=("probe_mod",))
    yield z
    z.close()


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PROBE_UNSET"}
    return env | {"PROBE_VALUE": "given", "PYTHONPATH": str(tmp_path / "lib")}


def test_a_forked_child_is_what_its_exec_would_have_been(
    zygote: Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    args = [sys.executable, "-m", "probe_mod", "report", "3"]
    assert zygote.serves(args) == "probe_mod"
    outs = {}
    for how in ("fork", "exec"):
        with (tmp_path / f"{how}.out").open("wb") as out:
            if how == "fork":
                p = zygote.spawn("probe_mod", args[3:], _env(tmp_path), out)
                assert p.wait(timeout=30) == 3
            else:
                e = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                     env=_env(tmp_path), start_new_session=True,
                                     stdin=subprocess.DEVNULL)  # fmt: skip
                assert e.wait(timeout=30) == 3
        outs[how] = json.loads((tmp_path / f"{how}.out").read_text())
    assert outs["fork"] == outs["exec"]
    assert outs["fork"]["argv"] == ["report", "3"] and outs["fork"]["name"] == "__main__"
    assert outs["fork"]["orig"] == args  # what a re-exec of itself runs
    assert outs["fork"]["cwd"] == str(work) and outs["fork"]["env"] == "given"
    assert not outs["fork"]["unset"] and outs["fork"]["own_session"]
    assert outs["fork"]["stdin"] == os.devnull and outs["fork"]["more_fds"] == []


def test_a_forked_childs_signals_and_waits_are_popens(zygote: Zygote, tmp_path: Path) -> None:
    with (tmp_path / "out").open("wb") as out:
        p = zygote.spawn("probe_mod", ["sleep", "0"], _env(tmp_path), out)
    assert p.poll() is None and p.returncode is None
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.2)
    os.killpg(p.pid, 0)  # a session, and so a process group, of its own
    p.terminate()
    assert p.wait(timeout=30) == -signal.SIGTERM and p.poll() == -signal.SIGTERM
    p.kill()  # an ended child is never signalled (its pid may be another's by now)


def test_what_the_zygote_cannot_fork_is_not_offered(zygote: Zygote) -> None:
    assert zygote.serves([sys.executable, "-m", "json.tool"]) is None
    assert zygote.serves(["/usr/bin/python3", "-m", "probe_mod"]) is None  # another interpreter
    assert zygote.serves(["unshare", "-n", sys.executable, "-m", "probe_mod"]) is None


def test_a_preload_that_starts_a_thread_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "threaded_mod.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="preloading started threads"):
        Zygote(preload=("threaded_mod",))


def test_a_pid_used_again_is_the_new_childs(zygote: Zygote, tmp_path: Path) -> None:
    """The zygote keeps what its children's exits were; a new child given a pid an ended one
    had (the kernel reuses them) is alive, not that one's exit status."""
    if os.geteuid() != 0:
        pytest.fail("needs root: it sets the kernel's last pid to make it reuse one")
    with (tmp_path / "out").open("wb") as out:
        for _ in range(20):  # another process may take the pid first: try again
            first = zygote.spawn("probe_mod", ["report", "7"], _env(tmp_path), out)
            assert first.wait(timeout=30) == 7
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(first.pid - 1))
            second = zygote.spawn("probe_mod", ["sleep", "0"], _env(tmp_path), out)
            if second.pid == first.pid:
                break
            second.kill()
            second.wait(timeout=30)
        else:
            pytest.fail("the kernel never gave the pid again in 20 tries")
        assert second.poll() is None, "a new child read as the ended one's exit"
        second.kill()
        assert second.wait(timeout=30) == -signal.SIGKILL
