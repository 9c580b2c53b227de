"""The README's "Graphics, video and desktops" commands, run as written on a live cluster of an
H100 node and an L40S node: the encoder job and the graphics job land on the L40S, each told
the driver capabilities the section says. Then its transcode and render examples, on an L40S
node alone."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.ops.localcluster import LocalCluster
from gpufleet.shims.install import install
from support.readme import README, blocks, lines, run_line, script_env, section
from support.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_the_readmes_engine_commands_run_where_the_engines_are(
    new_cluster: Any, tmp_path: Path
) -> None:
    text = section("Graphics, video and desktops")
    sh = blocks(text)[0]
    c: LocalCluster = new_cluster(agents=1, gpus="2xH100")
    c.start_agent(1, "--simulate", "2xL40S")
    c.wait_nodes(2)
    env = {**os.environ, "GPUFLEET_SERVER": c.url, "GPUFLEET_TOKEN": c.admin_token}
    ids = []
    for line in lines(sh):
        assert line.startswith("gpufleet "), line
        ids += re.findall(r"Submitted job (\S+)", run_line(line, tmp_path, env))
    assert len(ids) == 2
    said = re.findall(r"told `([\w,]+)`", text)
    assert said == ["compute,utility,video", "compute,utility"]
    with c.admin() as a:
        for job, caps in zip(ids, said, strict=True):
            wait_for(f"job {job} ends", lambda j=job: a.job(j).state == "SUCCEEDED", 60)
            (p,) = a.job(job).placement
            assert p.node == "node-1", a.job(job)  # the L40S node
            wait_for(f"job {job}'s log", lambda j=job: a.logs(j).complete, 30)
            assert a.logs(job).data == f"{caps}\n"


def test_the_readmes_mixed_simulation_runs_as_written() -> None:
    text = section("Graphics, video and desktops")
    (line,) = lines(blocks(text)[1])
    assert line.startswith("gpufleet simulate mixed "), line
    apart, together = json.loads(run_line(f"{line} --json", README.parent, timeout_s=600))
    assert (apart["policy"], together["policy"]) == ("apart", "together")
    assert apart["utilization"]["L40S"]["training"] == 0.0  # kept apart
    assert together["utilization"]["L40S"]["training"] > 0.0
    assert apart["desktops"] == together["desktops"] > 0
    # --videos-per-hour --pack-encoders: only training on the L40S leaves encoders to pack
    assert apart["videos"] == together["videos"] > 0 == apart["videos_packed"]
    assert together["videos_packed"] > 0 and together["engines"]["L40S"]["nvenc"] > 0.0


def frame_count(video: Path) -> int:
    probe = ["ffprobe", "-v", "error", "-count_frames", "-show_entries", "stream=nb_read_frames"]
    out = subprocess.run([*probe, "-of", "csv=p=0", str(video)], capture_output=True, text=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="a real driver: NVENC would be used")
@pytest.mark.skipif(not shutil.which("blender"), reason="Debian's blender is not installed")
def test_the_readmes_transcode_and_render_run_as_written(new_cluster: Any, tmp_path: Path) -> None:
    """On simulated L40S GPUs: the transcode is given an NVENC GPU but no driver, so it encodes
    with libx264 and says why; the render array's frames and the gather's video land in the
    submit directory."""
    text = section("Graphics, video and desktops")
    transcode, render = blocks(text)[2:4]
    c: LocalCluster = new_cluster(agents=1, gpus="2xL40S")
    c.wait_nodes(1)
    bindir = tmp_path / "bin"
    install(bindir)
    submit = tmp_path / "submit"
    submit.mkdir()
    # the job's python3 is this venv's (gpufleet installed), as a node's `pip install gpufleet`
    env = script_env()
    env = {
        **env,
        "PATH": f"{bindir}:{env['PATH']}",
        "PWD": str(submit),
        "GPUFLEET_SERVER": c.url,
        "GPUFLEET_TOKEN_FILE": str(c.admin_token_file),
        "GPUFLEET_CONFIG": "/nonexistent",
    }
    env.pop("GPUFLEET_TOKEN", None)
    done = subprocess.run(
        ["bash", "-ec", transcode], cwd=submit, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    (tid,) = re.findall(r"Submitted job (\S+)", done.stdout)
    script = render + 'echo "array $frames"'
    done = subprocess.run(
        ["bash", "-ec", script], cwd=submit, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    (array,) = re.findall(r"^array (\S+)$", done.stdout, re.M)
    (gather,) = re.findall(r"Submitted batch job (\S+)", done.stdout)
    with c.admin() as a:
        ended = {"SUCCEEDED", "FAILED"}
        wait_for("the transcode ends", lambda: a.job(tid).state in ended, 120)
        log = (submit / f"slurm-{tid}.out").read_text()
        assert a.job(tid).state == "SUCCEEDED", log
        assert "transcode: libx264: the job was given GPU" in log, log
        assert "nvidiactl is missing" in log, log
        (row,) = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
        assert row["metric"] == "transcode_fps" and row["encoder"] == "libx264", row
        assert row["frames"] == 4 * 30 and row["value"] > 0, row
        assert frame_count(submit / "transcode.mp4") == 4 * 30
        wait_for("the gather ends", lambda: a.job(gather).state in ended, 300)
        assert a.job(gather).state == "SUCCEEDED", a.logs(gather).data
    frames = sorted(p.name for p in (submit / "frames").iterdir())
    assert frames == [f"frame_{f:04d}.png" for f in range(1, 13)]
    assert frame_count(submit / "render.mp4") == 12
    for task in range(1, 5):
        out = (submit / f"slurm-{array}_{task}.out").read_text()
        first = 3 * (task - 1) + 1
        assert f"render: frames {first}-{first + 2} on the CPU" in out, out
        assert out.count("Saved: ") == 3, out
    assert "gather: 12 frames -> render.mp4" in (submit / f"slurm-{gather}.out").read_text()
