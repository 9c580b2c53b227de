"""The install is split into extras: the base (``gpufleet[agent]``) is what a node needs to run
an agent, with no web server, database or numerics; ``[server]``, ``[postgres]``, ``[sim]``
add theirs. This keeps the base honest: the agent imports with every other extra's modules
made unimportable."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"
# a distribution's import name, where it is not the distribution's own name
MODULE_OF = {"psycopg": "psycopg", "pyyaml": "yaml", "nvidia-ml-py": "pynvml"}


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].strip().lower()


def extras() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    base = {_name(r) for r in project["dependencies"]}
    opt = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    return base, opt


def test_the_extras_split_the_install_and_all_holds_every_runtime_one() -> None:
    base, opt = extras()
    assert opt["agent"] == set()  # the base install is the agent's
    assert {"fastapi", "sqlalchemy", "alembic", "uvicorn"} <= opt["server"]
    assert opt["postgres"] == {"psycopg"} and opt["sim"] == {"numpy", "matplotlib"}
    assert opt["all"] == {"gpufleet"}  # gpufleet[server,postgres,sim,ray]
    assert opt["ray"] == {"ray"}  # simulate sweep --ray only, imported only then
    assert not base & (opt["server"] | opt["postgres"] | opt["sim"] | opt["ray"])


def test_the_agent_and_a_users_cli_run_with_only_the_base_install() -> None:
    _, opt = extras()
    others = opt["server"] | opt["postgres"] | opt["sim"]
    blocked = sorted(MODULE_OF.get(d, d) for d in others)
    code = (
        "import sys\n"
        f"for m in {blocked!r}: sys.modules[m] = None  # ImportError on import\n"
        "import gpufleet.agent.main, gpufleet.agent.__main__, gpufleet.client\n"
        "from gpufleet.cli.main import app\n"
        "for argv in (['agent', '--help'], ['jobs', '--help'], ['submit', '--help']):\n"
        "    try:\n"
        "        app(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, (argv, e.code)\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "ok", r.stderr[-2000:]
