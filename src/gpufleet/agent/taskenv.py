"""A task's environment, built from nothing.

Nothing of the agent's own environment reaches a job (an agent started from a shell with
``GPUFLEET_TOKEN`` exported would hand its token to every job): the base is what sudo's
``secure_path`` and a login give — PATH, HOME, USER, LOGNAME, SHELL of the account the task
runs as, TMPDIR — then the submitter's environment captured at submit (sbatch's --export: its
PATH replaces the base's, the account's own keys stay), then what the node's admin set for
every task (``--task-env``), then the job's spec and the launch (the controller merges them:
Slurm and torchrun variables), and the GPUs the agent gives it last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpufleet.agent.accounts import Account, LaunchRefused

# sudo's default secure_path (Debian's sudoers; Slurm's task prolog starts from the same)
SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def base_env(account: Account, tmpdir: str) -> dict[str, str]:
    return {
        "PATH": SECURE_PATH,
        "HOME": account.home,
        "USER": account.name,
        "LOGNAME": account.name,
        "SHELL": account.shell,
        "TMPDIR": tmpdir,
    }


# what stays the task's own account's whatever the submitter's environment said (Slurm sets
# them for the job's user); TMPDIR is the task's private directory
ACCOUNT_KEYS = frozenset({"HOME", "USER", "LOGNAME", "SHELL", "TMPDIR"})


def task_env(
    account: Account,
    tmpdir: str,
    node_env: Mapping[str, str],
    launch_env: Mapping[str, str],
    visible_devices: str,
    user_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``user_env``: the submitter's environment captured at submit (sbatch's --export),
    which replaces the login-like base (its PATH included) but not the account's own keys."""
    captured = {k: v for k, v in (user_env or {}).items() if k not in ACCOUNT_KEYS}
    env = {**base_env(account, tmpdir), **captured, **node_env, **launch_env}
    env["CUDA_VISIBLE_DEVICES"] = visible_devices  # the agent's, last
    _job_ids(env, account)
    check_no_nul(env, [])
    return env


# a host's value that breaks an image (its programs and libraries are elsewhere): never given
# to a container whose own environment is not known
HOST_ONLY = frozenset({"PATH", "LD_LIBRARY_PATH"})


def container_env(
    account: Account,
    node_env: Mapping[str, str],
    launch_env: Mapping[str, str],
    visible_devices: str,
    user_env: Mapping[str, str] | None,
    image_names: frozenset[str] | None,
) -> dict[str, str]:
    """A task's environment in a container, as pyxis gives it: the login-like base and the
    submitter's environment are the job's, but a name the image's own environment sets
    (``ENV PATH=…``, ``LD_LIBRARY_PATH``, ``CUDA_VERSION``) keeps the image's value; what the
    job asked for by name (its spec's env, pyxis's --container-env), the node's and the
    launch's (Slurm and torchrun variables) and the GPUs override the image. ``image_names``:
    the names the image sets (None: unknown; then PATH and LD_LIBRARY_PATH are the image's)."""
    keep_image = HOST_ONLY if image_names is None else image_names
    captured = {k: v for k, v in (user_env or {}).items() if k not in ACCOUNT_KEYS}
    ambient = {**base_env(account, "/tmp"), **captured}
    env = {k: v for k, v in ambient.items() if k not in keep_image}
    env.update(node_env)
    env.update(launch_env)
    env["CUDA_VISIBLE_DEVICES"] = visible_devices
    _job_ids(env, account)
    check_no_nul(env, [])
    return env


def _job_ids(env: dict[str, str], account: Account) -> None:
    """A Slurm job's SLURM_JOB_UID and SLURM_JOB_GID: the account it runs as, which only the
    node knows."""
    if "SLURM_JOB_ID" in env:
        env["SLURM_JOB_UID"], env["SLURM_JOB_GID"] = str(account.uid), str(account.gid)


def with_step_commands(env: dict[str, str], bindir: str) -> None:
    """A task that can reach step daemons (a batch job's) finds ``srun`` and ``scontrol``
    first on its PATH, whatever PATH the job brought."""
    if bindir and "GPUFLEET_STEP_HOSTS" in env:
        env["PATH"] = f"{bindir}:{env['PATH']}" if env.get("PATH") else bindir


def check_no_nul(env: Mapping[str, str], command: Sequence[str]) -> None:
    """A NUL byte cannot reach exec(2): say which field holds it (Popen says only
    'embedded null byte')."""
    for i, arg in enumerate(command):
        if "\0" in arg:
            raise LaunchRefused(f"refused: command[{i}] contains a NUL byte")
    for k, v in env.items():
        if "\0" in k or "=" in k or not k:
            raise LaunchRefused(f"refused: bad environment variable name {k!r}")
        if "\0" in v:
            raise LaunchRefused(f"refused: env[{k!r}] contains a NUL byte")
