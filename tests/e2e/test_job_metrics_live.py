"""A job's own metrics, live: the transcode example (ffmpeg; on simulated L40S GPUs, with no
NVIDIA driver, it encodes with libx264) writes its frames/s to ``$GPUFLEET_METRICS_FILE``, its
agent reads the file as the task ends and reports it, and the controller shows it in
``gpufleet show JOB`` and as ``gpufleet_job_metric{hpc_job, name}`` on /metrics. A job that
writes bad lines (NaN, labels, an odd name) gets the good ones taken and each bad one named;
one whose file is too big gets nothing taken, and says why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_engine_metrics_live import series

from gpufleet.ops.localcluster import LocalCluster
from support.readme import script_env
from support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.requires("ffmpeg")]

ENDED = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}
BAD = '# a comment\ngood 1.5\nratio=0.25\nbad nan\nbig 1e400\nlab{x="y"} 2\n9lives 3\ngood 7\n'


def show(c: LocalCluster, job: str) -> str:
    env = {**script_env(), "GPUFLEET_SERVER": c.url, "GPUFLEET_TOKEN": c.admin_token}
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "show", job],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_transcodes_frames_per_second_are_a_job_metric(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(agents=1, gpus="2xL40S")
    python = sys.executable  # this venv's, with gpufleet, as a node's `pip install gpufleet`
    transcode = {
        "name": "transcode",
        "gpus_per_worker": 1,
        "gpu_engines": {"nvenc": 1},
        "command": [python, "-m", "gpufleet.examples.transcode", "--seconds", "1",
                    "--size", "160x120", "--out", str(tmp_path / "t.mp4")],
        "submit_env": {"PATH": os.environ["PATH"]},
    }  # fmt: skip
    bad = {"name": "bad", "command": ["sh", "-c", f"printf '{BAD}' > $GPUFLEET_METRICS_FILE"]}
    huge = {"name": "huge", "command": ["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' 'a' "
                                        "> $GPUFLEET_METRICS_FILE"]}  # fmt: skip
    with c.admin() as a:
        ids = [a.submit(s)[0] for s in (transcode, bad, huge)]
        for j in ids:
            wait_for(f"job {j} ends", lambda j=j: a.job(j).state in ENDED, 120)
            assert a.job(j).state == "SUCCEEDED", a.logs(j).data
        tid, bid, hid = ids
        m = wait_for("the transcode's metrics", lambda: a.job(tid).metrics, 30)
        assert m.values["transcode_fps"] > 0 and m.values["transcode_frames"] == 30, m
        assert m.values["nvenc"] == 0 and m.problems == []  # libx264: no driver here
        text = a.http.get("/metrics").text
        got = {(lb["hpc_job"], lb["name"]): v for lb, v in series(text, "gpufleet_job_metric")}
        assert got[(tid, "transcode_fps")] == m.values["transcode_fps"]
        b = wait_for("the bad file's report", lambda: a.job(bid).metrics, 30)
        assert b.values == {"good": 1.5, "ratio": 0.25}
        assert b.problems == [
            "line 4: bad: 'nan' is not a finite number of at most 1e+15",
            "line 5: big: '1e400' is not a finite number of at most 1e+15",
            "line 6: labels are not taken (write: name value)",
            "line 7: '9lives' is not a metric name ([A-Za-z_][A-Za-z0-9_]*, 64 at most)",
            "line 8: good given twice (the first is kept)",
        ]
        h = wait_for("the huge file's report", lambda: a.job(hid).metrics, 30)
        assert h.values == {} and h.problems == ["the file is over 16384 bytes: not read"]
    out = show(c, tid)
    assert "transcode_fps" in out and "Metrics (reported" in out, out
    out = show(c, bid)
    assert "metrics file refused: line 4: bad: 'nan' is not a finite number" in out, out


def test_a_restarted_controller_knows_a_running_jobs_metrics_again(
    new_cluster: Any, tmp_path: Path
) -> None:
    """The file does not change after the restart: the agent, registered anew, reports it
    again (before, the new controller showed no metrics until the file's next change); and the
    last report of a job that ended before the restart, which its agent keeps."""
    # its tasks run on while the controller is away (ADR 0048's outage tolerance)
    c: LocalCluster = new_cluster(
        agents=1, gpus="2xL40S", node_grace_s=0.0, controller_args=["--outage-tolerance-s", "120"]
    )
    go = tmp_path / "go"
    writes = f'echo "frames 42" > "$GPUFLEET_METRICS_FILE"; until [ -e {go} ]; do sleep 0.2; done'
    wrote = 'echo "frames 7" > "$GPUFLEET_METRICS_FILE"'
    with c.admin() as a:
        (jid,) = a.submit({"name": "steady", "command": ["sh", "-c", writes]})
        m = wait_for("the first report", lambda: a.job(jid).metrics, 60)
        assert m.values == {"frames": 42.0}
        (done,) = a.submit({"name": "done", "command": ["sh", "-c", wrote]})
        wait_for("the short job ends", lambda: a.job(done).state in ENDED, 60)
        assert wait_for("its report", lambda: a.job(done).metrics, 60).values == {"frames": 7.0}
    c.kill_controller()
    c.start_controller()
    with c.admin() as a:
        wait_for(
            "the job running under the new controller", lambda: a.job(jid).state == "RUNNING", 60
        )
        m = wait_for("the same metrics, unchanged file", lambda: a.job(jid).metrics, 60)
        assert m.values == {"frames": 42.0} and m.problems == []
        assert a.job(jid).attempt == 1  # the same task, whose file did not change
        ended = wait_for("the ended job's kept report", lambda: a.job(done).metrics, 60)
        assert ended.values == {"frames": 7.0}
        go.touch()
        wait_for("the job ends", lambda: a.job(jid).state in ENDED, 60)
        assert a.job(jid).state == "SUCCEEDED", a.logs(jid).data
