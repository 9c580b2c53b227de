"""The numeric limits of a job spec, apart from ``job.py``: the #SBATCH reader (``io/sbatch/``,
and so the ``sbatch`` shim) needs these few constants and not the whole model (catalog,
constraint parser, containers, secrets), which it would import with ``job.py``."""

from __future__ import annotations

from gpufleet.model.resources import MILLI

# The largest a worker may ask for: above any node that exists (and so a plain Unschedulable
# Reason), far below what the int64 milli columns hold.
MAX_CPUS = 100_000.0
MAX_MEMORY_GIB = float(1 << 20)  # 1 PiB
MAX_TIME_LIMIT_S = 1e9  # about 31 years

# The bounds (inclusive) that ``JobSpec.from_dict`` holds each number of a spec to, by its key.
# The API's schema of a job spec (``gpufleet.api.jobspec``) is built from this table and from
# ``SPEC_TEXT``, and tests/unit/test_model_jobspec_schema.py checks both against what from_dict
# accepts and refuses, so the published schema and the rules cannot drift apart.
SPEC_BOUNDS: dict[str, tuple[float, float]] = {  # ints where the key is an integer
    "workers": (1, 4096),  # gang size
    "gpus_per_worker": (0, 64),
    "gpu_milli": (1, MILLI),
    "cpus": (0, MAX_CPUS),
    "memory_mib": (0, round(MAX_MEMORY_GIB * 1024)),
    "memory_gib": (0, MAX_MEMORY_GIB),
    "time_limit_s": (0, MAX_TIME_LIMIT_S),
    "priority": (-1_000_000, 1_000_000),
    "max_retries": (0, 100),
    # the warning signal (``signal``, Slurm's --signal=[B:]SIG[@T]): its number (Linux's
    # 1..64; a name is read as its number) and how long before the time limit it goes out
    "signal.signal": (1, 64),
    "signal.before_s": (0, 0xFFFF),  # Slurm's bound on T
    # the checkpoint notice at a preemption (``checkpoint``: model/notice.py): its signal as
    # the warning signal's, its grace as Slurm's T; and the run before any preemption
    "checkpoint.signal": (1, 64),
    "checkpoint.grace_s": (0, 0xFFFF),
    "min_runtime_s": (0, MAX_TIME_LIMIT_S),
    "idle_exempt_s": (0, MAX_TIME_LIMIT_S),  # capped by the queue's idle exempt_max
    "tasks_per_worker": (1, 4096),
    # Slurm's sbatch --begin: not started before this time (seconds since the epoch; 0: none)
    "begin_time": (0, 1e11),  # tasks sharing one worker's resources (Slurm's per node)
}
MAX_NODE_NAMES = 4096  # names in nodelist or exclude, after hostlist expansion
MAX_QUEUES = 64  # the queues (Slurm's partitions) one job may name in ``queues``
# Slurm's signal names (its sig_name2num; with or without SIG, any case) and their Linux numbers
SIGNALS: dict[str, int] = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
    "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
    "STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22,
    "URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29,
    "PWR": 30, "SYS": 31,
}  # fmt: skip
SIGNAL_BEFORE_S = 60  # Slurm's default T when only SIG is given


def signal_number(v: int | str) -> int:
    """A signal's number from its number or its name (``SIG`` optional, any case), as Slurm's
    sig_name2num reads one; ValueError (Slurm's words) for another or one a Linux node cannot
    deliver (1-64)."""
    text = str(v).strip()
    if text.isascii() and text.isdigit():
        if not 1 <= int(text) <= 64:
            raise ValueError(f"Unknown job signal: {v}")
        return int(text)
    name = text.upper().removeprefix("SIG")
    if isinstance(v, bool) or name not in SIGNALS:
        raise ValueError(f"Unknown job signal: {v}")
    return SIGNALS[name]
