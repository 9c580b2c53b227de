"""``gpufleet submit --image … --mount SRC:DST[:ro] --container-workdir …`` makes the spec's
container; a mount without an image, or a bad one, is refused before anything is sent."""

from __future__ import annotations

from test_cli_support import FakeApi, api, cli

__all__ = ["api"]  # the fixture, imported for pytest


def test_submit_with_an_image_mounts_and_a_workdir(api: FakeApi) -> None:
    r = cli(
        "submit", "--dry-run", "--json", "--image", "localhost/app:1",
        "--mount", "/data:/data:ro", "--mount", "/scratch", "--container-workdir", "/data",
        "--", "python", "train.py",
    )  # fmt: skip
    assert r.code == 0, r.stderr
    assert r.json()["spec"]["container"] == {
        "image": "localhost/app:1",
        "mounts": "/data:/data:ro,/scratch",
        "workdir": "/data",
    }
    assert "container" not in cli("submit", "--dry-run", "--json", "--", "x").json()["spec"]


def test_a_mount_without_an_image_or_a_bad_mount_is_refused(api: FakeApi) -> None:
    r = cli("submit", "--dry-run", "--mount", "/a:/b", "--", "x")
    assert r.code == 2 and "--mount needs --image" in r.stderr
    r = cli("submit", "--dry-run", "--image", "i", "--mount", "rel:/b", "--", "x")
    assert r.code == 2 and "container.mounts[0].source" in r.stderr
    assert "must be an absolute path" in r.stderr
