"""A tiny container image for the container tests, built here from the node's busybox (no
registry is reachable from CI): ``localhost/gpufleet-test:2``, imported into podman once.

A static busybox (busybox-static) is copied alone; Debian's ``busybox`` package is a dynamic
one, which needs its loader and libraries in the image too (without them every container
fails at once: ``catatonit: failed to exec pid1: No such file or directory``). Tag 2: the
images tagged 1 were built without them."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from realparts import require

IMAGE = "localhost/gpufleet-test:2"
TOOLS = ("sh", "id", "cat", "env", "pwd", "sleep", "echo", "ls", "true")


def build_image() -> str:
    """The image's name, once podman has it (podman, runc and busybox required)."""
    require("podman", "runc", "busybox")
    exists = ["podman", "image", "exists", IMAGE]
    if subprocess.run(exists, capture_output=True, timeout=120).returncode == 0:
        return IMAGE
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "bin").mkdir()
        busybox = shutil.which("busybox") or "/bin/busybox"
        shutil.copy2(busybox, root / "bin" / "busybox")
        for lib in shared_objects(busybox):  # none for a static busybox
            (root / lib.parent.relative_to("/")).mkdir(parents=True, exist_ok=True)
            shutil.copy2(lib, root / lib.relative_to("/"))  # the file a link names
        for t in TOOLS:
            (root / "bin" / t).symlink_to("busybox")
        for sub in ("tmp", "work", "mnt"):
            (root / sub).mkdir()
            os.chmod(root / sub, 0o1777)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        done = subprocess.run(
            ["podman", "import", "-", IMAGE], stdin=tar.stdout, capture_output=True, timeout=120
        )
        tar.wait()
        assert done.returncode == 0, done.stderr
    return IMAGE


def shared_objects(binary: str) -> list[Path]:
    """The loader and libraries a dynamic executable needs, by ``ldd`` (none: a static one)."""
    done = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:  # "not a dynamic executable"
        return []
    # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)", "/lib64/ld-linux-x86-64.so.2 (0x…)"
    return [Path(w) for line in done.stdout.splitlines() for w in line.split() if w[:1] == "/"]


ENV_IMAGE = "localhost/gpufleet-test-env:2"
# what that image's own environment (ENV) sets: a job's exported values of these yield to it
IMAGE_ENV = {"IMAGE_SAYS": "image", "PATH": "/bin:/opt/img"}


def build_env_image() -> str:
    """``localhost/gpufleet-test-env:2``: the test image with ENV lines of its own (IMAGE_ENV),
    as an image built FROM another with ``ENV`` has (pyxis: they win over the job's)."""
    base = build_image()
    exists = ["podman", "image", "exists", ENV_IMAGE]
    if subprocess.run(exists, capture_output=True, timeout=120).returncode == 0:
        return ENV_IMAGE
    with tempfile.TemporaryDirectory() as d:
        lines = [f"FROM {base}\n", *(f"ENV {k}={v}\n" for k, v in IMAGE_ENV.items())]
        Path(d, "Containerfile").write_text("".join(lines))
        done = subprocess.run(
            ["podman", "build", "--pull=never", "-t", ENV_IMAGE, d],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
    return ENV_IMAGE
