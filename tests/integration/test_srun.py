"""srun and the step daemon as real processes: step daemons on 127.0.0.1 with distinct ports
as a batch job's nodes, srun run as the batch script on the first node would run it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from slurmnodes import fake_job

PY_C = (sys.executable, "-c")
SHOW = 'echo "$SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"'


def test_label_gathers_each_tasks_lines_in_order_with_its_ids(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=3, tasks_per_node=2) as job:
        script = f'{SHOW}; for i in 1 2 3; do echo "line$i"; done; echo oops >&2'
        r = job.srun("-N2", "--ntasks-per-node=2", "--label", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 16
    by_task: dict[str, list[str]] = {}
    for line in lines:
        label, _, text = line.partition(": ")
        by_task.setdefault(label, []).append(text)
    assert sorted(by_task) == ["0", "1", "2", "3"]
    expect = {"0": "0 0 0 node0", "1": "1 1 0 node0", "2": "2 0 1 node1", "3": "3 1 1 node1"}
    for task, texts in by_task.items():
        assert texts[0].startswith(expect[task]), texts
        assert texts[1:] == ["line1", "line2", "line3"]  # each task's lines in its order
    assert sorted(r.stderr.splitlines()) == ["0: oops", "1: oops", "2: oops", "3: oops"]


def test_step_env_describes_the_step_and_steps_count_up(tmp_path: Path) -> None:
    show = (
        'echo "$SLURM_STEP_ID $SLURM_STEP_NUM_TASKS $SLURM_STEP_NUM_NODES $SLURM_STEP_NODELIST '
        "$SLURM_STEP_TASKS_PER_NODE $SLURM_NTASKS $SLURM_GTIDS $RANK $WORLD_SIZE $LOCAL_RANK "
        '$MASTER_PORT $SLURM_TASK_PID $$"'
    )
    with fake_job(tmp_path, nodes=2, tasks_per_node=2) as job:
        first = job.srun("-n3", "sh", "-c", show)
        second = job.srun("sh", "-c", show)  # the job's own tasks: 2 on each node
        master = job.env(0)["MASTER_PORT"]
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    rows = sorted(line.split() for line in first.stdout.splitlines())
    assert [r[:7] for r in rows] == [
        ["0", "3", "2", "node[0-1]", "2,1", "3", "0,1"],
        ["0", "3", "2", "node[0-1]", "2,1", "3", "0,1"],
        ["0", "3", "2", "node[0-1]", "2,1", "3", "2"],
    ]
    assert sorted(r[7:10] for r in rows) == [["0", "3", "0"], ["1", "3", "1"], ["2", "3", "0"]]
    assert all(r[10] == master and r[11] == r[12] for r in rows)  # MASTER_PORT untouched
    assert {line.split()[0] for line in second.stdout.splitlines()} == {"1"}
    assert len(second.stdout.splitlines()) == 4


def test_one_task_exits_3_srun_exits_3_with_slurms_line(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2, tasks_per_node=2) as job:
        r = job.srun("sh", "-c", 'test "$SLURM_PROCID" = 2 && exit 3; exit 0')
    assert r.returncode == 3
    assert "srun: error: node1: task 2: Exited with exit code 3" in r.stderr.splitlines()


def test_output_and_error_files_by_task_as_srun_writes_them(tmp_path: Path) -> None:
    """submitit's form: -o/-e patterns with %j and %t, one file per task; -o alone takes
    stderr too; a task id sends only that task's output to srun's own stdout."""
    say = 'echo "out $SLURM_PROCID"; echo "err $SLURM_PROCID" >&2'
    with fake_job(tmp_path, nodes=2, tasks_per_node=2) as job:
        r = job.srun("-o", f"{tmp_path}/%j_%t_log.out", "-e", f"{tmp_path}/%j_%t_log.err",
                     "sh", "-c", say)  # fmt: skip
        both = job.srun("--output", f"{tmp_path}/n%n.log", "-l", "sh", "-c", say)
        one = job.srun("-o", "2", "sh", "-c", say)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    for t in range(4):
        assert (tmp_path / f"77_{t}_log.out").read_text() == f"out {t}\n"
        assert (tmp_path / f"77_{t}_log.err").read_text() == f"err {t}\n"
    for n, tasks in ((0, (0, 1)), (1, (2, 3))):  # a node's tasks share its file, labelled
        lines = (tmp_path / f"n{n}.log").read_text().splitlines()
        assert sorted(lines) == sorted(f"{t}: {w} {t}" for t in tasks for w in ("out", "err"))
    assert both.stdout == ""
    assert (one.stdout, one.stderr) == ("out 2\n", "err 2\n")  # the other tasks: nowhere


def test_a_signalled_task_is_reported_as_srun_reports_it(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2) as job:
        r = job.srun("sh", "-c", 'test "$SLURM_PROCID" = 1 && kill -9 $$; exit 2')
    assert r.returncode == 128 + 9
    err = r.stderr.splitlines()
    assert "srun: error: node1: task 1: Killed" in err
    assert "srun: error: node0: task 0: Exited with exit code 2" in err


def test_kill_on_bad_exit_ends_the_other_tasks(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2, tasks_per_node=2) as job:
        r = job.srun("-K", "sh", "-c", 'test "$SLURM_PROCID" = 3 && exit 3; exec sleep 3331')
    assert r.returncode == 3
    assert "srun: error: node1: task 3: Exited with exit code 3" in r.stderr.splitlines()
    assert "Terminating StepId=77.0" in r.stderr
    assert not _sleepers(tmp_path)


def test_wait_ends_the_rest_after_the_first_exits(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2) as job:
        r = job.srun("-W", "1", "sh", "-c", 'test "$SLURM_PROCID" = 0 && exit 0; exec sleep 3331')
    assert "First task exited 1s ago" in r.stderr
    assert not _sleepers(tmp_path)


def test_gpus_per_task_splits_the_nodes_gpus(tmp_path: Path) -> None:
    gpus = [["GPU-a", "GPU-b", "GPU-c", "GPU-d"], ["GPU-e", "GPU-f", "GPU-g", "GPU-h"]]
    with fake_job(tmp_path, nodes=2, tasks_per_node=2, gpus=gpus) as job:
        split = job.srun("--gpus-per-task=2", "sh", "-c", SHOW)
        shared = job.srun("sh", "-c", SHOW)
        too_many = job.srun("--gpus-per-task=3", "true")
    assert split.returncode == 0, split.stderr
    got = sorted(tuple(line.split()[::4]) for line in split.stdout.splitlines())
    assert got == [("0", "GPU-a,GPU-b"), ("1", "GPU-c,GPU-d"), ("2", "GPU-e,GPU-f"),
                   ("3", "GPU-g,GPU-h")]  # fmt: skip
    got = sorted(tuple(line.split()[::4]) for line in shared.stdout.splitlines())
    assert got[0] == ("0", "GPU-a,GPU-b,GPU-c,GPU-d")
    assert got[3] == ("3", "GPU-e,GPU-f,GPU-g,GPU-h")
    assert too_many.returncode == 1
    assert "needs 6 GPUs on node node0, which holds 4" in too_many.stderr


def test_a_wrong_key_is_refused(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2) as job:
        r = job.srun("true", key="00" * 32)
        ok = job.srun("true")
    assert r.returncode == 1
    assert "Unable to create step for job 77" in r.stderr
    assert "the step daemon refused: authentication failed" in r.stderr
    assert ok.returncode == 0, ok.stderr


def test_srun_killed_its_remote_tasks_die(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2) as job:
        p = job.popen_srun("-l", "sh", "-c", "echo up; exec sleep 3331")
        assert p.stdout is not None
        seen = {p.stdout.readline(), p.stdout.readline()}  # both tasks started
        assert seen == {"0: up\n", "1: up\n"}
        remote = [c for c in psutil.Process(job.daemons[0].pid).children(recursive=True)]
        assert remote
        p.kill()
        p.communicate(timeout=30)
        _, alive = psutil.wait_procs(remote, timeout=30)
        assert not alive  # no orphan on the remote "node"
        assert job.daemons[0].poll() is None  # the daemon serves on
    assert not _sleepers(tmp_path)


def test_stepd_sigterm_kills_its_tasks_and_exits_0(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2) as job:
        p = job.popen_srun("-l", "sh", "-c", "echo up; exec sleep 3331")
        assert p.stdout is not None
        p.stdout.readline(), p.stdout.readline()
        daemon = job.daemons[0]
        tasks = psutil.Process(daemon.pid).children(recursive=True)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
        _, alive = psutil.wait_procs(tasks, timeout=30)
        assert not alive
        p.kill()
        p.communicate(timeout=30)


def test_stepd_sigterm_lets_tasks_end_then_kills_the_stubborn(tmp_path: Path) -> None:
    script = (
        'if [ "$SLURM_PROCID" = 2 ]; then trap "" TERM; '
        'elif [ "$SLURM_PROCID" = 3 ]; then trap "echo got-term; exit 0" TERM; fi; '
        "echo up; sleep 3331 & wait"
    )
    with fake_job(tmp_path, nodes=2, tasks_per_node=2) as job:
        p = job.popen_srun("-l", "sh", "-c", script)
        assert p.stdout is not None
        for _ in range(4):
            p.stdout.readline()
        daemon = job.daemons[0]
        tasks = psutil.Process(daemon.pid).children(recursive=True)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(60) == 0
        _, alive = psutil.wait_procs(tasks, timeout=30)
        assert not alive  # task 2 ignored SIGTERM: killed after the wait
        p.send_signal(signal.SIGTERM)  # the local tasks end too: srun says all it got
        out, _ = p.communicate(timeout=60)
    assert "3: got-term" in out.splitlines()  # SIGTERM first: a task could checkpoint


def test_outside_a_job_srun_refuses(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GPUFLEET_"))}
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet.slurm.srun", "hostname"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert "runs inside a batch job; submit with gpufleet submit / sbatch" in r.stderr


def test_scontrol_show_hostnames(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "gpufleet.slurm.scontrol"]
    r = subprocess.run([*run, "show", "hostnames", "node[01-03]"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "node01\nnode02\nnode03\n"
    env = {**os.environ, "SLURM_JOB_NODELIST": "gpu-[7,9]"}
    r = subprocess.run([*run, "show", "hostnames"], capture_output=True, text=True, env=env)
    assert r.stdout == "gpu-7\ngpu-9\n"
    r = subprocess.run([*run, "show", "job"], capture_output=True, text=True)
    assert r.returncode == 1 and "only 'show hostnames" in r.stderr


def _sleepers(root: Path) -> list[psutil.Process]:
    """The tasks of the job under ``root`` still sleeping: ``sleep 3331`` with a TMPDIR of
    that job's (a test on another xdist worker runs sleepers of its own at the same time)."""
    me = os.getpid()
    out = []
    for p in psutil.process_iter(["cmdline", "ppid"]):
        cmd = p.info["cmdline"] or []
        if cmd[-2:] != ["sleep", "3331"] or p.info["ppid"] == me:
            continue
        try:
            tmp = p.environ().get("TMPDIR", "")
        except psutil.NoSuchProcess:  # it ended meanwhile
            continue
        if tmp.startswith(f"{root}/"):
            out.append(p)
    return out


@pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None, reason="needs torch")
def test_srun_trains_the_ddp_example_across_two_nodes(tmp_path: Path) -> None:
    import gpufleet.examples.ddp_train as ddp

    with fake_job(tmp_path, nodes=2) as job:
        r = job.srun("-N2", "--ntasks-per-node=1", sys.executable, ddp.__file__, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WORLD_SIZE=2 RANK=0" in r.stdout


def test_output_bytes_come_back_exactly_long_lines_and_not_utf8(tmp_path: Path) -> None:
    code = (
        "import os, sys; o = sys.stdout.buffer\n"
        "if os.environ['SLURM_PROCID'] != '1': sys.exit()\n"  # the remote task speaks
        "o.write(b'x' * 200000 + b'\\n');"
        "o.write(b'\\xff\\xfe raw\\n'); o.write(b'no newline at the end')"
    )
    with fake_job(tmp_path, nodes=2) as job:
        for flags in ([], ["-u"]):
            r = subprocess.run(
                [sys.executable, "-m", "gpufleet.slurm.srun", *flags, "-N2", *PY_C, code],
                env=job.env(0),
                capture_output=True,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            assert r.stdout == b"x" * 200000 + b"\n\xff\xfe raw\nno newline at the end"


def test_a_stranger_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    import socket
    import struct

    with fake_job(tmp_path, nodes=2) as job:
        with socket.create_connection(("127.0.0.1", job.ports[1]), timeout=10) as s:
            s.recv(4096)  # the challenge
            s.sendall(struct.pack("!I", 100 << 20))  # "here come 100 MiB"
            assert s.recv(4096) == b""  # closed, nothing allocated for it
        assert job.srun("true").returncode == 0  # and it serves on


@pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None, reason="needs torch")
def test_srun_one_torchrun_per_node_trains_the_ddp_example(tmp_path: Path) -> None:
    import gpufleet.examples.ddp_train as ddp

    torchrun = (
        f"exec {sys.executable} -m torch.distributed.run --nnodes=2 --nproc-per-node=1 "
        "--node-rank=$SLURM_NODEID --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT "
        f"{ddp.__file__}"
    )
    with fake_job(tmp_path, nodes=2) as job:
        r = job.srun("-l", "--ntasks-per-node=1", "sh", "-c", torchrun, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0: WORLD_SIZE=2 RANK=0" in r.stdout


def test_ctrl_c_once_reports_twice_ends_the_step(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2) as job:
        p = job.popen_srun("-l", "sh", "-c", "echo up; exec sleep 3331")
        assert p.stdout is not None and p.stderr is not None
        p.stdout.readline(), p.stdout.readline()
        p.send_signal(signal.SIGINT)
        assert p.stderr.readline() == "srun: interrupt (one more within 1 sec to abort)\n"
        assert p.stderr.readline() == "srun: StepId=77.0 tasks 0-1: running\n"
        # again until one lands within a second of the one before (a loaded machine may
        # take longer between two; srun then reports again): it sends the tasks SIGINT
        while True:
            p.send_signal(signal.SIGINT)
            line = p.stderr.readline()
            if "sending Ctrl-C" in line:
                break
            assert line == "srun: interrupt (one more within 1 sec to abort)\n", line
            p.stderr.readline()  # the tasks' states
        _, err = p.communicate(timeout=60)
        err = line + err
    assert "sending Ctrl-C to StepId=77.0" in err
    assert p.returncode == 128 + signal.SIGINT, err
    assert not _sleepers(tmp_path)


def test_a_reader_gone_ends_the_step(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2) as job:
        pipe = subprocess.run(
            f"{sys.executable} -m gpufleet.slurm.srun sh -c 'yes | head -c 10000000; "
            "exec sleep 3331' | head -1",
            shell=True,
            env=job.env(0),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert pipe.stdout == "y\n"
    assert "Terminating StepId=77.0" in pipe.stderr and "Traceback" not in pipe.stderr
    assert not _sleepers(tmp_path)


def test_no_step_daemon_there_is_said_plainly(tmp_path: Path) -> None:
    with fake_job(tmp_path, nodes=2) as job:
        job.daemons[0].kill()
        job.daemons[0].wait(30)
        env = {**job.env(0), "GPUFLEET_STEP_WAIT_S": "0"}
        r = subprocess.run(
            [sys.executable, "-m", "gpufleet.slurm.srun", "true"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 1
    assert f"node slot 1 (127.0.0.1:{job.ports[1]}): no step daemon listens there" in r.stderr
