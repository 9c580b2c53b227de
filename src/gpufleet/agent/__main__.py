"""``python -m gpufleet.agent --controller URL --token-file F --name N [--simulate 8xH100] ...``

The token never travels on the command line (every local user, and every job on the node, can
read ``/proc/PID/cmdline``): it comes from ``--token-file`` (mode 0600) or ``$GPUFLEET_TOKEN``."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path

# as the gpufleet command does (cli/__init__.py): httpx's own command line (click, pygments,
# rich: ~50 ms of CPU at every agent start) marked missing before the agent imports httpx
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable"

from gpufleet.agent import bootid  # noqa: E402
from gpufleet.agent.gpu import GpuUnavailable  # noqa: E402
from gpufleet.agent.main import RESTART, run_agent  # noqa: E402
from gpufleet.agent.nodecommand import NodeCommands  # noqa: E402
from gpufleet.base import optionfile  # noqa: E402
from gpufleet.base.secretfile import private_umask, read_secret  # noqa: E402
from gpufleet.model.catalog import GPU_MODELS  # noqa: E402

NO_ARGV_TOKEN = (
    "--token puts the secret on the command line, where every user and job on this node can "
    "read it: use --token-file FILE (mode 0600) or the GPUFLEET_TOKEN environment variable"
)


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"label {text!r} is not KEY=VALUE")
    return key, value


def _task_var(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or "\0" in text:
        raise argparse.ArgumentTypeError(f"--task-env {text!r} is not KEY=VALUE")
    return key, value


SIMULATE_HELP = (
    "simulated GPUs instead of NVML (no GPU needed): COUNT (1-64) GPUs of MODEL, e.g. "
    "--simulate 8xH100 or --simulate 4xA100-80GB; MODEL is one of "
    f"{', '.join(m.name for m in GPU_MODELS)} or an alias of one (H100, A100, V100)"
)


CONFIG_HELP = (
    "a YAML file of these options, e.g. /etc/gpufleet/agent.yaml (controller: URL, name: "
    "gpu-07, token-file: FILE, ...); options typed after it win"
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpufleet-agent", description="the gpufleet node agent")
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument(
        "--controller",
        required=True,
        help="controller URL, e.g. http://10.0.0.1:8600; several, comma-separated, for "
        "controllers in high availability (the agent follows the leader)",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file holding this node's agent token, mode 0600 (default: env GPUFLEET_TOKEN)",
    )
    p.add_argument("--token", help=argparse.SUPPRESS)  # refused, with what to use instead
    p.add_argument(
        "--ca",
        metavar="FILE",
        help="CA certificate to verify an https controller with (default: env GPUFLEET_CA, "
        "else the system CAs)",
    )
    p.add_argument("--name", required=True, help="this node's name")
    p.add_argument("--simulate", metavar="COUNTxMODEL", help=SIMULATE_HELP)
    p.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="SPEC",
        help="a fault for simulated GPUs, e.g. xid79@gpu3:120s (repeatable); while the agent "
        "runs, faults written to DATA_DIR/inject are injected then (AT counted from then)",
    )
    p.add_argument("--data-dir", default="./gpufleet-agent", help="task logs and state")
    p.add_argument("--leaf", default="leaf-0")
    p.add_argument("--pod", default="pod-0")
    p.add_argument("--label", action="append", default=[], type=_label, metavar="KEY=VALUE")
    p.add_argument(
        "--feature",
        action="append",
        default=[],
        metavar="NAME[,NAME…]",
        help="a node feature -C/--constraint matches (Slurm's Features=); repeatable",
    )
    p.add_argument(
        "--gres-type",
        default="",
        metavar="TYPE",
        help="the site's GPU type name --gres=gpu:TYPE matches (default: the model's, a100, …)",
    )
    p.add_argument(
        "--task-env",
        action="append",
        default=[],
        type=_task_var,
        metavar="KEY=VALUE",
        help="a variable every task gets (repeatable); tasks inherit nothing of the agent's own "
        "environment",
    )
    _limits(p)
    return p


def _limits(p: argparse.ArgumentParser) -> None:
    """The options of timings, resources, containers and the start's checks."""
    p.add_argument(
        "--gpu-sharing",
        choices=("timeslice", "mps"),
        default="timeslice",
        help="how jobs holding fractions of a GPU share it: timeslice (CUDA's own; shares not "
        "enforced) or mps (NVIDIA MPS: each job's SM share and memory limit enforced)",
    )
    p.add_argument(
        "--gpu-replicas",
        type=int,
        default=0,
        metavar="N",
        help="offer each GPU time-sliced as N replicas: a job asks one with --gpu-share 1/N "
        "(NVIDIA's device plugin timeSlicing replicas; memory not bounded)",
    )
    p.add_argument("--address", help="address other nodes reach this one at (MASTER_ADDR)")
    p.add_argument("--heartbeat-s", type=float, default=5.0)
    p.add_argument("--poll-wait-s", type=float, default=20.0)
    p.add_argument("--fence-grace-s", type=float, default=2.0)
    p.add_argument("--cpus", type=float, help="CPU cores to offer (default: all)")
    p.add_argument("--memory-gib", type=float, help="memory to offer (default: all)")
    p.add_argument("--expected-gpus", type=int, help="GPUs this node should have")
    p.add_argument("--temp-max-c", type=float, default=90.0)
    p.add_argument(
        "--container-runtime",
        default="",
        choices=["", "apptainer", "singularity", "enroot", "podman", "docker", "none"],
        help="the runtime for jobs with a container image (default: the first found of "
        "apptainer, singularity, enroot, podman, docker; none: refuse such jobs)",
    )
    p.add_argument(
        "--boot-id-file",
        default=str(bootid.BOOT_ID),
        help="where this boot's id is read: a new one means the node rebooted, and the tasks "
        "of the agent before died with it (tests fake a reboot with another file)",
    )
    p.add_argument(
        "--no-access-check",
        action="store_true",
        help="start even when other accounts cannot run this agent's Python and helpers (as "
        "root, it checks at start, since tasks run as their owners with them): for a node "
        "whose jobs all run as the agent's own account, e.g. a demo",
    )
    p.add_argument("--log-level", default="INFO")


def agent_token(args: argparse.Namespace, env: MutableMapping[str, str] = os.environ) -> str:
    """The token from ``--token-file``, else ``$GPUFLEET_TOKEN``; ValueError saying what to do.

    The variable is taken out of the environment: tasks the agent starts never inherit it."""
    from_env = env.pop("GPUFLEET_TOKEN", "").strip()
    if args.token_file:
        return read_secret(args.token_file, "agent token")
    token = from_env
    if not token:
        raise ValueError("no agent token: pass --token-file FILE (mode 0600) or set GPUFLEET_TOKEN")
    return token


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    raw = sys.argv[1:] if argv is None else list(argv)
    try:
        words = optionfile.expand(raw, optionfile.argparse_options(p))
    except optionfile.OptionFileError as e:
        print(f"gpufleet agent: {e}", file=sys.stderr)
        return 2
    args = p.parse_args(words)
    if args.token is not None:
        p.error(NO_ARGV_TOKEN)
    try:
        token = agent_token(args)
    except ValueError as e:
        print(f"gpufleet agent: {e}", file=sys.stderr)
        return 2
    private_umask()  # task logs, state and their directories: the agent's user's alone
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
    # the imports live as long as the process: frozen, the cyclic GC never walks them again
    gc.collect()
    gc.freeze()
    try:
        rc = run_agent(
            args.controller,
            token,
            args.name,
            simulate=args.simulate,
            data_dir=args.data_dir,
            leaf=args.leaf,
            pod=args.pod,
            labels=dict(args.label),
            features=[x for f in args.feature for x in f.split(",") if x],
            gres_type=args.gres_type,
            gpu_sharing=args.gpu_sharing,
            gpu_replicas=args.gpu_replicas,
            heartbeat_s=args.heartbeat_s,
            inject=args.inject,
            address=args.address,
            cpu_cores=args.cpus,
            memory_gib=args.memory_gib,
            expected_gpus=args.expected_gpus,
            temp_max_c=args.temp_max_c,
            poll_wait_s=args.poll_wait_s,
            fence_grace_s=args.fence_grace_s,
            task_env=dict(args.task_env),
            container_runtime=args.container_runtime,
            ca=args.ca,
            boot_id_file=args.boot_id_file,
            check_access=not args.no_access_check,
        )
    except (ValueError, GpuUnavailable) as e:
        print(f"gpufleet agent: {e}", file=sys.stderr)
        return 2
    if rc == RESTART:
        _restart(args, token, raw)
    return rc


def _restart(args: argparse.Namespace, token: str, argv: Sequence[str]) -> None:
    """An operator's restart (``gpufleet maintain --agent-upgrade``): this process becomes the
    agent again, the same arguments, under the interpreter the restart checked (a new
    install's), keeping its pid; the new agent adopts the tasks (ADR 0031)."""
    data = Path(args.data_dir).expanduser().resolve()
    python = NodeCommands(data).pending_restart() or sys.executable
    if not args.token_file:  # taken out of the environment at start: the next one needs it
        os.environ["GPUFLEET_TOKEN"] = token
    logging.shutdown()
    os.execv(python, [python, "-m", "gpufleet.agent", *argv])


if __name__ == "__main__":
    sys.exit(main())
