"""sbatch's input environment variables (``SBATCH_PARTITION``, ``SBATCH_TIMELIMIT``, …): each
sets one of sbatch's options, as Slurm 22.05's ``_opt_env`` does, after the script's ``#SBATCH``
lines and before the command line's options, so that an exported ``SBATCH_TIMELIMIT`` wins over
the script's ``--time`` and ``sbatch -t`` wins over both (recorded from Slurm 22.05 in
``tests/e2e/slurm_printed/sbatch_env.txt``). A bad value is refused as that option's is."""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.io.slurm_opts import BY_NAME, Given

# The variables Slurm 22.05's sbatch reads, in its table's order (a later one sets the same
# option over an earlier one), and the option each sets. Not here: SBATCH_DEBUG (-v, sbatch's
# own chatter), SBATCH_POWER and SBATCH_WAIT4SWITCH (no option of their own in 22.05's table).
VARS: tuple[tuple[str, str], ...] = (
    ("SBATCH_ACCOUNT", "account"),
    ("SBATCH_ACCTG_FREQ", "acctg-freq"),
    ("SBATCH_ARRAY_INX", "array"),
    ("SBATCH_BATCH", "batch"),
    ("SBATCH_BURST_BUFFER", "bb"),
    ("SBATCH_CLUSTER_CONSTRAINT", "cluster-constraint"),
    ("SBATCH_CLUSTERS", "clusters"),
    ("SLURM_CLUSTERS", "clusters"),
    ("SBATCH_CONSTRAINT", "constraint"),
    ("SBATCH_CONTAINER", "container"),
    ("SLURM_CONTAINER", "container"),
    ("SBATCH_CORE_SPEC", "core-spec"),
    ("SBATCH_CPUS_PER_GPU", "cpus-per-gpu"),
    ("SBATCH_CPU_FREQ_REQ", "cpu-freq"),
    ("SBATCH_DELAY_BOOT", "delay-boot"),
    ("SBATCH_DISTRIBUTION", "distribution"),
    ("SBATCH_ERROR", "error"),
    ("SBATCH_EXCLUSIVE", "exclusive"),
    ("SBATCH_EXPORT", "export"),
    ("SBATCH_GET_USER_ENV", "get-user-env"),
    ("SBATCH_GRES", "gres"),
    ("SBATCH_GRES_FLAGS", "gres-flags"),
    ("SBATCH_GPUS", "gpus"),
    ("SBATCH_GPU_BIND", "gpu-bind"),
    ("SBATCH_GPU_FREQ", "gpu-freq"),
    ("SBATCH_GPUS_PER_NODE", "gpus-per-node"),
    ("SBATCH_GPUS_PER_SOCKET", "gpus-per-socket"),
    ("SBATCH_GPUS_PER_TASK", "gpus-per-task"),
    ("SLURM_HINT", "hint"),
    ("SBATCH_HINT", "hint"),
    ("SBATCH_IGNORE_PBS", "ignore-pbs"),
    ("SBATCH_INPUT", "input"),
    ("SBATCH_JOB_NAME", "job-name"),
    ("SBATCH_MEM_BIND", "mem-bind"),
    ("SBATCH_MEM_PER_CPU", "mem-per-cpu"),
    ("SBATCH_MEM_PER_GPU", "mem-per-gpu"),
    ("SBATCH_MEM_PER_NODE", "mem"),
    ("SBATCH_NETWORK", "network"),
    ("SBATCH_NO_KILL", "no-kill"),
    ("SBATCH_NO_REQUEUE", "no-requeue"),
    ("SBATCH_OPEN_MODE", "open-mode"),
    ("SBATCH_OUTPUT", "output"),
    ("SBATCH_OVERCOMMIT", "overcommit"),
    ("SBATCH_PARTITION", "partition"),
    ("SBATCH_PROFILE", "profile"),
    ("SBATCH_QOS", "qos"),
    ("SBATCH_REQ_SWITCH", "switches"),
    ("SBATCH_REQUEUE", "requeue"),
    ("SBATCH_RESERVATION", "reservation"),
    ("SBATCH_SIGNAL", "signal"),
    ("SBATCH_SPREAD_JOB", "spread-job"),
    ("SBATCH_THREAD_SPEC", "thread-spec"),
    ("SBATCH_THREADS_PER_CORE", "threads-per-core"),
    ("SBATCH_TIMELIMIT", "time"),
    ("SBATCH_USE_MIN_NODES", "use-min-nodes"),
    ("SBATCH_WAIT", "wait"),
    ("SBATCH_WAIT_ALL_NODES", "wait-all-nodes"),
    ("SBATCH_WCKEY", "wckey"),
)


def env_options(environ: Mapping[str, str]) -> list[Given]:
    """The options ``environ``'s input variables set, in sbatch's order, each written as the
    variable (``SBATCH_TIMELIMIT=xyz``) so that a refusal names it; line 0, as the command
    line's: they come after every #SBATCH line."""
    out: list[Given] = []
    for var, name in VARS:
        value = environ.get(var)
        if value is None:
            continue
        opt = BY_NAME[name]
        # an option that takes no value is set by the variable's presence (Slurm ignores its
        # value); an optional one takes a value that is not empty
        arg = None if opt.arg == "none" or (opt.arg == "optional" and not value) else value
        out.append(Given(opt, arg, 0, f"{var}={value}"))
    return out
