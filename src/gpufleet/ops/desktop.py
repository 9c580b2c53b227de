"""One desktop session, run as the replica of a desktop service (``gpufleet desktop run``):
an X server, a VNC server on it, and noVNC's browser client over websockify, both on the
node's loopback, behind the session's door on ``$PORT`` (the port the gateway routes to:
``desktop_key.py``), which lets in only connections that present the replica's key
(``$GPUFLEET_DESKTOP_KEY``, which the gateway adds to each request it forwards). Here the X
server is Xvfb (software); on a node with a GPU X server or EGL, ``--x-server`` names
another command line taking the display (not tested here: no GPU).

The root window is painted ``--color`` (``xsetroot``), so a screenshot shows the session
drew something known, and ``--run`` starts a program on the display (an xterm, a desktop
environment). If any of the processes ends, the others are stopped and the session exits
non-zero (the service restarts it); SIGTERM stops them all.

    python3 -m gpufleet.ops.desktop --geometry 1280x800 --color '#2e8b57'
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from gpufleet.ops.desktop_key import Door

NOVNC = Path("/usr/share/novnc")
COLOR = "#2e8b57"  # "sea green": what the e2e test looks for in the screenshot
WAIT_S = 30.0
PR_SET_PDEATHSIG = 1
KEY_ENV = "GPUFLEET_DESKTOP_KEY"


def _with_parent() -> None:
    """In each child: SIGTERM when the session's process dies, even by SIGKILL (no X server,
    VNC server or websockify is left behind holding its display and ports)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"desktop: {what} exited ({proc.returncode}) before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"desktop: {what} did not listen on {port} within {WAIT_S:g} s")


def _need(*names: str) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise SystemExit(
            f"desktop: not installed on this node: {', '.join(missing)} "
            "(Debian: apt-get install xvfb x11vnc novnc websockify x11-xserver-utils)"
        )


def start_x(x_server: str, geometry: str) -> tuple[subprocess.Popen[bytes], str]:
    """The X server and its display (``-displayfd``: it picks a free one and says which)."""
    r, w = os.pipe()
    argv = [*shlex.split(x_server), "-displayfd", str(w)]
    if Path(argv[0]).name == "Xvfb":
        argv += ["-screen", "0", f"{geometry}x24", "-nolisten", "tcp", "-noreset"]
    proc = subprocess.Popen(argv, pass_fds=(w,), stderr=subprocess.DEVNULL, preexec_fn=_with_parent)
    os.close(w)
    with os.fdopen(r) as f:
        number = f.readline().strip()
    if not number.isdigit():
        proc.kill()
        raise SystemExit(f"desktop: the X server ({argv[0]}) gave no display number")
    return proc, f":{number}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpufleet-desktop", description=__doc__.split("\n")[0])
    p.add_argument("--geometry", default="1280x800")
    p.add_argument("--color", default=COLOR)
    p.add_argument("--run", default="", help="a program to start on the display")
    p.add_argument("--x-server", default="Xvfb", help="the X server's command line")
    p.add_argument(
        "--listen",
        default=os.environ.get("GPUFLEET_DESKTOP_LISTEN", "0.0.0.0"),
        help="the address the session's door listens on (the gateway must reach it)",
    )
    a = p.parse_args(argv)
    port = int(os.environ.get("PORT", "0"))
    key = os.environ.pop(KEY_ENV, "")  # not passed on to the programs of the session
    if not port or not key:
        raise SystemExit(f"desktop: no $PORT or ${KEY_ENV} (run it as a desktop service's replica)")
    _need(shlex.split(a.x_server)[0], "x11vnc", "websockify", "xsetroot")
    procs: list[subprocess.Popen[bytes]] = []

    def stop(*_: object) -> None:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()

    def on_term(*_: object) -> None:
        stop()
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        x, display = start_x(a.x_server, a.geometry)
        procs.append(x)
        env = {**os.environ, "DISPLAY": display}
        subprocess.run(["xsetroot", "-solid", a.color], env=env, check=True)
        if a.run:
            procs.append(subprocess.Popen(shlex.split(a.run), env=env, preexec_fn=_with_parent))
        vnc = _free_port()
        quiet = ["-quiet", "-nopw", "-forever", "-shared", "-localhost"]
        cmd = ["x11vnc", "-display", display, "-rfbport", str(vnc), *quiet]
        procs.append(
            subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_with_parent
            )
        )
        _wait_port(vnc, procs[-1], "x11vnc")
        inner = _free_port()
        web = ["websockify", "--web", str(NOVNC), f"127.0.0.1:{inner}", f"127.0.0.1:{vnc}"]
        procs.append(subprocess.Popen(web, stderr=subprocess.DEVNULL, preexec_fn=_with_parent))
        _wait_port(inner, procs[-1], "websockify")
        door = Door(a.listen, port, inner, key)
        door.start()
        print(f"desktop: display {display} ({a.geometry}) on port {port}", flush=True)
        while all(proc.poll() is None for proc in procs):
            time.sleep(0.5)
        ended = next(proc for proc in procs if proc.poll() is not None)
        print(f"desktop: {ended.args!r} exited ({ended.returncode})", flush=True)
        return 1
    finally:
        stop()


if __name__ == "__main__":
    sys.exit(main())
