"""A tiny container image for the container tests, built here from a static busybox (no
registry is reachable from CI): ``localhost/gpufleet-test:1``, imported into podman once."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from realparts import require

IMAGE = "localhost/gpufleet-test:1"
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
        shutil.copy2(shutil.which("busybox") or "/bin/busybox", root / "bin" / "busybox")
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


ENV_IMAGE = "localhost/gpufleet-test-env:1"
# what that image's own environment (ENV) sets: a job's exported values of these yield to it
IMAGE_ENV = {"IMAGE_SAYS": "image", "PATH": "/bin:/opt/img"}


def build_env_image() -> str:
    """``localhost/gpufleet-test-env:1``: the test image with ENV lines of its own (IMAGE_ENV),
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
