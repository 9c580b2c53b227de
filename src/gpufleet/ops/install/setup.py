"""``gpufleet setup controller`` and ``gpufleet setup node``: the files of ``/etc/gpufleet``
and the systemd unit of each, written so that a second run changes nothing (and says so),
and what to do next."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpufleet.ops.install import units
from gpufleet.ops.install.files import Change, put

ETC = Path("/etc/gpufleet")
SYSTEMD = Path("/etc/systemd/system")
CONTROLLER_DATA = Path("/var/lib/gpufleet")
AGENT_DATA = Path("/var/lib/gpufleet-agent")


class SetupError(ValueError):
    """What stops the setup, and what to do."""


@dataclass(frozen=True)
class Where:
    """Where setup writes: ``/etc/gpufleet`` and systemd's directory (others for tests)."""

    etc: Path = ETC
    systemd: Path = SYSTEMD


def gpufleet_executable() -> Path:
    """The ``gpufleet`` of this installation: beside this Python (a venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "gpufleet"
    if beside.is_file():
        return beside.absolute()
    found = shutil.which("gpufleet")
    if found is None:
        raise SetupError("no gpufleet executable beside this Python nor on PATH")
    return Path(found).absolute()


def _yaml(intro: str, options: dict[str, object]) -> str:
    import yaml

    given = {k: v if isinstance(v, int) else str(v) for k, v in options.items() if v != ""}
    body = yaml.safe_dump(given, sort_keys=False, default_flow_style=False)
    return "".join(f"# {line}".rstrip() + "\n" for line in intro.splitlines()) + body


def controller(
    where: Where,
    *,
    host: str,
    port: int,
    data_dir: Path,
    user: str,
    gpufleet: Path,
    force: bool = False,
) -> list[Change]:
    """controller.yaml and the controller's unit (the account must exist: ``account``)."""
    config = where.etc / "controller.yaml"
    text = _yaml(
        f"The gpufleet controller's options: `gpufleet controller --config {config}`, as\n"
        f"{units.CONTROLLER} runs it. A key is an option of `gpufleet controller --help`\n"
        "without its dashes (fallback-account: svc, queues: /etc/gpufleet/queues.yaml, ...).\n",
        {"host": host, "port": port, "data-dir": data_dir},
    )
    changes = [put(config, text, 0o644, ours=force)]
    if data_dir.parent != units.STATE:  # else systemd makes it (StateDirectory=)
        changes.append(_private_dir(data_dir, user))
    unit = units.controller_unit(gpufleet, config, data_dir, user)
    return [*changes, put(where.systemd / units.CONTROLLER, unit, 0o644, ours=True)]


def _private_dir(path: Path, user: str) -> Change:
    """The controller's data directory, 0700 and its account's (ProtectSystem=strict needs it
    to exist before the start)."""
    entry = pwd.getpwnam(user)
    made = not path.exists()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (entry.pw_uid, entry.pw_gid, 0o700):
        return Change(path, "wrote" if made else "unchanged")
    os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(0o700)
    return Change(path, "wrote" if made else "updated", f"0700, {user}'s")


def node(
    where: Where,
    *,
    controller_url: str,
    name: str,
    data_dir: Path,
    gpufleet: Path,
    token_from: Path | None = None,
    simulate: str = "",
    leaf: str = "",
    force: bool = False,
) -> list[Change]:
    """agent.yaml, the agent's token (copied from ``token_from``, 0600) and the agent's unit."""
    config, token = where.etc / "agent.yaml", where.etc / "agent.token"
    text = _yaml(
        f"The gpufleet agent's options: `gpufleet agent --config {config}`, as {units.AGENT}\n"
        "runs it. A key is an option of `gpufleet agent --help-agent` without its dashes\n"
        "(feature: [ib], label: {rack: r1}, gres-type: a100, ...).\n",
        {
            "controller": controller_url,
            "name": name,
            "token-file": token,
            "data-dir": data_dir,
            "leaf": leaf,
            "simulate": simulate,
        },
    )
    changes = [put(config, text, 0o644, ours=force)]
    if token_from is not None:
        changes.append(_token(token_from, token))
    elif token.exists() and stat.S_IMODE(token.stat().st_mode) != 0o600:
        token.chmod(0o600)
        changes.append(Change(token, "updated", "mode 0600"))
    changes.append(
        put(where.systemd / units.AGENT, units.agent_unit(gpufleet, config), 0o644, ours=True)
    )
    return changes


def _token(source: Path, token: Path) -> Change:
    try:
        text = source.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise SetupError(f"--token-from {source}: {e.strerror or e}") from None
    if not text or "\n" in text:
        raise SetupError(f"--token-from {source}: expected a token on one line")
    return put(token, text + "\n", 0o600, ours=True)


def client(where: Where, server: str, *, force: bool = False) -> Change:
    """client.yaml: the controller every user's gpufleet and Slurm commands on this host talk
    to, unless their own settings say otherwise (their token stays their own)."""
    text = _yaml(
        "The controller that gpufleet and its Slurm commands talk to on this host, for every\n"
        "user; each user's own settings (GPUFLEET_SERVER, ~/.config/gpufleet/config.yaml)\n"
        "win. No token here: each user has their own.\n",
        {"server": server},
    )
    return put(where.etc / "client.yaml", text, 0o644, ours=force)


def account(user: str, home: Path) -> Change | None:
    """The controller's system account, made when it is missing (as root); None: it exists."""
    try:
        pwd.getpwnam(user)
        return None
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise SetupError(f"there is no account {user!r}: run this as root to make it")
    nologin = shutil.which("nologin") or "/usr/sbin/nologin"
    argv = ["useradd", "--system", "--user-group", "--no-create-home"]
    argv += ["--home-dir", str(home), "--shell", nologin, user]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SetupError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return Change(Path(f"account {user}"), "wrote", "a system account for the controller")


def unreachable_install() -> list[str]:
    """What of this gpufleet (its Python, its package) the accounts jobs run as could not
    reach: the agent the unit starts would refuse to start (agent/access.py looks at more)."""
    import sysconfig

    import gpufleet
    from gpufleet.base.reach import Closed, closed

    found = [
        closed(Path(sys.executable), run=True),
        closed(Path(sysconfig.get_paths()["stdlib"])),
        closed(Path(gpufleet.__file__).parent, tree=True),
    ]
    once: dict[Path, Closed] = {}
    for c in found:
        if c is not None:
            once.setdefault(c.path, c)  # one line per closed directory, the first that hit it
    return [f"{c.line()}; fix: {c.fix}" for c in once.values()]


def default_name() -> str:
    """This node's name as Slurm takes it: the host name up to its first dot."""
    return socket.gethostname().split(".")[0]
