"""Pack the probe modules into one ``python3 -c`` program, so a job runs them on a node that
has only a Python interpreter: no gpufleet, no files to copy, nothing left behind.

The program carries the modules' sources (JSON, zlib, base64: about a fifth of their size),
installs an import hook that serves them as the package ``gpufleet_probe`` (so their relative
imports work as they do here) and calls ``gpufleet_probe.<probe>.main(args)``. This module is
not shipped; it runs on the side that submits the job."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from functools import cache
from importlib import resources

PACKAGE = "gpufleet_probe"
MODULES = ("common", "gpu", "system", "clock", "storage", "node", "net", "nccl")
PROBES = ("node", "net", "nccl")

_BOOT = """\
import base64, importlib.abc, importlib.util, json, sys, zlib
S = json.loads(zlib.decompress(base64.b64decode({payload!r})))
P = {package!r}
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == P or (name.startswith(P + ".") and name[len(P) + 1:] in S):
            return importlib.util.spec_from_loader(name, self, is_package=name == P)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        name = module.__name__
        if name != P:
            exec(compile(S[name[len(P) + 1:]], "<gpufleet probe " + name + ">", "exec"),
                 module.__dict__)
sys.meta_path.insert(0, Finder())
probe = sys.argv[1]
sys.argv = ["gpufleet-probe " + probe] + sys.argv[2:]
sys.exit(__import__(P + "." + probe, fromlist=["main"]).main(sys.argv[1:]))
"""


@cache
def sources() -> dict[str, str]:
    pkg = resources.files("gpufleet.ops.probes")
    return {m: (pkg / f"{m}.py").read_text(encoding="utf-8") for m in MODULES}


@cache
def program() -> str:
    """The ``-c`` program: the bootstrap with every module inside."""
    raw = json.dumps(sources(), sort_keys=True).encode()
    payload = base64.b64encode(zlib.compress(raw, 9)).decode()
    return _BOOT.format(payload=payload, package=PACKAGE)


def command(python: str, probe: str, args: Sequence[str] = ()) -> list[str]:
    """The job's command: ``python -c <program> <probe> <args>``."""
    if probe not in PROBES:
        raise ValueError(f"no probe {probe!r} (known: {', '.join(PROBES)})")
    return [python, "-c", program(), probe, *args]


def example_command(python: str, name: str, args: Sequence[str] = ()) -> list[str]:
    """One of gpufleet's example programs (``ddp_train.py``, ``gang_hello.py``), shipped the
    same way: its source as ``python -c``."""
    text = (resources.files("gpufleet") / "examples" / name).read_text(encoding="utf-8")
    return [python, "-c", text, *args]
