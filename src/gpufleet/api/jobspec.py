"""The job spec as the OpenAPI schema shows it: its keys, their types, bounds, defaults and
enums, for people and for generated clients.

``gpufleet.model.job.JobSpec.from_dict`` stays the one reader of a submitted spec (the same
one for YAML files, ``#SBATCH`` scripts and the CLI): it reports each problem naming its field
(``body.spec.workers``) and holds the rules a schema cannot say (a GPU share needs one GPU per
worker, a CPU-only job names no GPU model, the size of a whole command). The models here are
built from the same tables (``SPEC_BOUNDS``, ``SPEC_TEXT``, ``TopologyLevel``, the JobSpec's
defaults), and tests/unit/test_model_jobspec_schema.py walks their JSON schema against what
``from_dict`` accepts and refuses, so the two cannot drift apart.

``JobSpecIn`` describes the request (``JobSubmit.spec``): the body is read as a JSON object,
every string and number in it checked (``bounds.CleanJson``, all problems at once), and then
``from_dict`` reads it. ``JobSpecOut`` (``jobspec_out.py``) is the spec as a job shows it
(``JobOut.spec``, the store's own shape: milli-CPUs, MiB, the environment as pairs).
``documented_as`` puts either in the OpenAPI schema for a field whose value stays the plain
JSON object."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from gpufleet.model.catalog import GPU_MODELS
from gpufleet.model.container import MAX_IMAGE, MAX_MOUNTS, MAX_PATH
from gpufleet.model.job import SPEC_TEXT, JobSpec, TopologyLevel
from gpufleet.model.limits import MAX_NODE_NAMES, MAX_QUEUES, SIGNALS, SPEC_BOUNDS
from gpufleet.model.resources import MILLI
from gpufleet.model.secrets import (
    ENV_PATTERN,
    FILE_PATTERN,
    MAX_ENV_NAME,
    MAX_SECRET_NAME,
    MAX_SECRETS,
    NAME_PATTERN,
)
from gpufleet.model.validate import MAX_COMMAND, MAX_ENV, MAX_ITEMS, MAX_NAME

_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclass_fields(JobSpec)}


def _bounded(key: str, default: Any, doc: str) -> Any:
    lo, hi = SPEC_BOUNDS[key]
    return Field(default, ge=lo, le=hi, description=doc)


def _text(key: str, **kw: Any) -> Any:
    return Field(min_length=1, max_length=SPEC_TEXT[key], **kw)


NOT_BLANK = "not blank; no NUL byte or lone surrogate"
# the environment: names without '=' (execve's KEY=VALUE), values as text
ENV_SCHEMA: dict[str, Any] = {
    "type": "object",
    "maxProperties": MAX_ITEMS,
    "propertyNames": {"minLength": 1, "maxLength": MAX_NAME, "pattern": "^[^=]*$"},
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "maxLength": SPEC_TEXT["env"]},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
        ]
    },
}


_NodeNames = (
    Annotated[str, Field(min_length=1, max_length=SPEC_TEXT["nodelist"])]
    | Annotated[
        list[Annotated[str, Field(min_length=1, max_length=SPEC_TEXT["nodelist"])]],
        Field(max_length=MAX_ITEMS),
    ]
)

SUBMIT_ENV_SCHEMA: dict[str, Any] = {
    **ENV_SCHEMA,
    "additionalProperties": {"type": "string", "maxLength": SPEC_TEXT["submit_env"]},
}


class TopologyIn(BaseModel):
    model_config = ConfigDict(extra="forbid", title="TopologyIn")

    level: TopologyLevel | None = TopologyLevel.ANY
    required: bool | None = Field(False, description="true: wait for it; false: preferred")


_SIG_LO, _SIG_HI = SPEC_BOUNDS["signal.signal"]
SIGNAL_DOC = "a signal by number or by name, with or without SIG, any case: " + ", ".join(SIGNALS)


class SignalIn(BaseModel):
    model_config = ConfigDict(extra="forbid", title="SignalIn")

    signal: (
        Annotated[int, Field(ge=_SIG_LO, le=_SIG_HI)]
        | Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
    ) = Field(description=SIGNAL_DOC)
    before_s: int | None = _bounded(
        "signal.before_s", 60, "seconds before the time limit (at the start if it is shorter)"
    )
    batch_only: bool | None = Field(
        False,
        description="true (Slurm's B:): to each task's main process only, not its children; "
        "false: to each task's whole process group",
    )


class CheckpointIn(BaseModel):
    model_config = ConfigDict(extra="forbid", title="CheckpointIn")

    signal: (
        Annotated[int, Field(ge=_SIG_LO, le=_SIG_HI)]
        | Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
    ) = Field(description="sent first at a preemption; " + SIGNAL_DOC)
    grace_s: int | None = _bounded(
        "checkpoint.grace_s",
        60,
        "seconds to exit or write $GPUFLEET_CHECKPOINT_FILE before SIGTERM (capped by the "
        "queue's preempt_grace_max_s)",
    )
    batch_only: bool | None = Field(
        False, description="true (Slurm's B:): to the batch script's shell only"
    )


class SecretRefIn(BaseModel):
    model_config = ConfigDict(extra="forbid", title="SecretRefIn")

    name: str = Field(min_length=1, max_length=MAX_SECRET_NAME, pattern=NAME_PATTERN)
    scope: Literal["user", "queue", "cluster"] | None = Field(
        None,
        description="whose secret: the job's user's, its queue's or the cluster's (default: "
        "the first of these that has one of this name)",
    )
    env: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_ENV_NAME,
        pattern=ENV_PATTERN,
        description="the environment variable that gets the value (not GPUFLEET_…)",
    )
    file: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_SECRET_NAME,
        pattern=FILE_PATTERN,
        description="or: the file in $GPUFLEET_SECRETS_DIR that holds it (mode 0400)",
    )


IMAGE_PATTERN = r"^[^\s-][^\s]*$"  # no white space, not an option (model/container.py)
_PATH = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATH,
        pattern="^/[^:,]*$",
        description="an absolute path, without ':' or ','",
    ),
]


class MountIn(BaseModel):
    model_config = ConfigDict(extra="forbid", title="MountIn")

    source: _PATH = Field(description="the path on the node")
    target: _PATH = Field(description="the path in the container")
    read_only: bool | None = False


class ContainerIn(BaseModel):
    model_config = ConfigDict(extra="forbid", title="ContainerIn")

    image: str = Field(
        min_length=1,
        max_length=MAX_IMAGE,
        pattern=IMAGE_PATTERN,
        description="the image, as the node's runtime names it (e.g. docker://nvcr.io#nvidia/"
        "pytorch:24.05, localhost/app:1, /shared/app.sqsh)",
    )
    mounts: (
        Annotated[str, Field(description="pyxis's form SRC[:DST[:ro]],…")]
        | Annotated[list[MountIn], Field(max_length=MAX_MOUNTS)]
        | None
    ) = None
    workdir: _PATH | None = Field(None, description="where its tasks start (default: the image's)")


class JobSpecIn(BaseModel):
    """A job as a user asks for it. A key given as null takes its default."""

    model_config = ConfigDict(extra="forbid", title="JobSpecIn")

    name: str = _text("name", description=f"{NOT_BLANK}; no control character")
    user: Annotated[str, _text("user")] | None = Field(
        None,
        description="whose job it is: a user token's own user (the default); no control character",
    )
    queue: Annotated[str, _text("queue")] | None = Field(
        _DEFAULTS["queue"],
        description="the queue (Slurm's partition); with queues: one of them (default: the "
        "first of queues)",
    )
    queues: (
        Annotated[str, Field(min_length=1, max_length=MAX_QUEUES * (SPEC_TEXT["queues"] + 1))]
        | Annotated[
            list[Annotated[str, Field(min_length=1, max_length=SPEC_TEXT["queues"])]],
            Field(min_length=1, max_length=MAX_QUEUES),
        ]
        | None
    ) = Field(
        None,
        description="the queues the job may start in (Slurm's -p a,b): a list of names or one "
        "comma-separated string, none twice, at most "
        f"{MAX_QUEUES}; it starts in the first that admits it without borrowing, else the "
        "first that admits it by borrowing, and is shown with the queue it runs in first",
    )
    workers: int | None = _bounded(
        "workers", _DEFAULTS["workers"], "gang size: all start together or none does"
    )
    gpus_per_worker: int | None = _bounded(
        "gpus_per_worker", _DEFAULTS["gpus_per_worker"], "0: a CPU-only job"
    )
    gpu_milli: int | None = _bounded(
        "gpu_milli",
        _DEFAULTS["gpu_milli"],
        f"share of each GPU in thousandths; below {MILLI} needs gpus_per_worker 1",
    )
    cpus: float | None = _bounded(
        "cpus", _DEFAULTS["cpu_milli"] / MILLI, "CPU cores per worker (to the thousandth)"
    )
    memory_mib: int | None = _bounded(
        "memory_mib", None, "memory per worker in MiB; give this or memory_gib, not both"
    )
    memory_gib: float | None = _bounded(
        "memory_gib", _DEFAULTS["memory_mib"] / 1024, "memory per worker in GiB"
    )
    gpu_models: (
        Annotated[str, Field(description="names separated by ',' or '|'")]
        | Annotated[
            list[Annotated[str, Field(min_length=1, max_length=SPEC_TEXT["gpu_models"])]],
            Field(max_length=MAX_ITEMS),
        ]
        | None
    ) = Field(
        None,
        description="allowed GPU models (any when empty), by name or alias: "
        + ", ".join(m.name for m in GPU_MODELS),
    )
    time_limit_s: float | None = _bounded("time_limit_s", None, "seconds; 0 or null: none")
    priority: int | None = _bounded("priority", _DEFAULTS["priority"], "higher runs first")
    preemptible: bool | None = _DEFAULTS["preemptible"]
    topology: TopologyLevel | TopologyIn | None = Field(
        None, description="a level alone, or level and required (default: any, preferred)"
    )
    dataset: Annotated[str, _text("dataset")] | None = None
    max_retries: int | None = _bounded("max_retries", _DEFAULTS["max_retries"], "after a failure")
    command: (
        Annotated[str, _text("command", description="one shell line (/bin/sh -c)")]
        | Annotated[
            list[Annotated[str, Field(max_length=SPEC_TEXT["command"])]],
            Field(min_length=1, max_length=MAX_ITEMS),
        ]
        | None
    ) = Field(None, description=f"the program and its arguments; at most {MAX_COMMAND} in all")
    env: Annotated[dict[str, Any], WithJsonSchema(ENV_SCHEMA)] | None = Field(
        None,
        description=f"environment of every task; at most {MAX_ENV} characters in all; "
        "a number or true/false is passed as its text",
    )
    signal: (
        Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_NAME,
                description="Slurm's form [B:]SIG[@SECONDS], e.g. B:USR1@90 (SECONDS: 60 when "
                "not given)",
            ),
        ]
        | SignalIn
        | None
    ) = Field(
        None,
        description="a warning signal before the time limit (Slurm's --signal), sent once per "
        "attempt; no effect without a time limit",
    )
    checkpoint: (
        Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_NAME,
                description="Slurm's form [B:]SIG[@SECONDS], e.g. B:USR1@120 (the grace)",
            ),
        ]
        | CheckpointIn
        | None
    ) = Field(
        None,
        description="the notice a preemption gives: the signal, then up to the grace to exit or "
        "write $GPUFLEET_CHECKPOINT_FILE; without it, the warning signal stands in",
    )
    min_runtime_s: float | None = _bounded(
        "min_runtime_s", 0.0, "not preempted before it has run this long (each attempt)"
    )
    idle_exempt_s: float | None = _bounded(
        "idle_exempt_s", 0.0, "spared this much longer by its queue's idle-GPU policy (capped)"
    )
    kill_invalid_dep: bool | None = Field(
        None,
        description="a dependency that can never be met (an afterok job that did not succeed) "
        "cancels the job at once (true) or leaves it pending, Reason DependencyNeverSatisfied, "
        "until it is cancelled (false); absent: the controller's --kill-invalid-depend decides "
        "(Slurm's sbatch --kill-on-invalid-dep=yes|no)",
    )
    hold: bool | None = Field(
        None,
        description="submitted held (Slurm's sbatch -H/--hold): pending, Reason JobHeldUser, "
        "never started until released (POST /jobs/{id}/hold with release)",
    )
    begin_time: float | None = _bounded(
        "begin_time",
        0.0,
        "not started before this time, in seconds since the epoch (Slurm's sbatch --begin): "
        "pending with Reason BeginTime until then; 0: none",
    )
    requeue: bool | None = Field(
        _DEFAULTS["requeue"],
        description="requeue the job when a node it runs on is lost (Slurm's --requeue); "
        "false (--no-requeue): the job fails instead",
    )
    secrets: list[SecretRefIn] | None = Field(
        None,
        max_length=MAX_SECRETS,
        description="secrets its tasks get, each as a variable (env) or a file (file); "
        "each must exist and be the job's to use when it is submitted",
    )
    distinct_nodes: bool | None = Field(
        _DEFAULTS["distinct_nodes"],
        description="every worker on a node of its own (Slurm's --nodes: one worker per node)",
    )
    tasks_per_worker: int | None = _bounded(
        "tasks_per_worker",
        _DEFAULTS["tasks_per_worker"],
        "tasks that share one worker's GPUs, CPUs and memory (Slurm's --ntasks-per-node); "
        "the launch environment counts workers × tasks_per_worker tasks",
    )
    nodelist: _NodeNames | None = Field(
        None,
        description="nodes the job must include, one worker each (Slurm's -w): a hostlist "
        f"such as gpu-[01-04] or a list of them; at most {MAX_NODE_NAMES} names expanded",
    )
    exclude: _NodeNames | None = Field(
        None,
        description=f"nodes the job must not use (Slurm's -x); a hostlist or a list of them; "
        f"at most {MAX_NODE_NAMES} names expanded",
    )
    constraint: str | None = Field(
        None,
        min_length=1,
        max_length=SPEC_TEXT["constraint"],
        description="node features every worker's node must have (Slurm's -C): names with & "
        "(and), | (or), parentheses, and one [a|b] (every node the same choice); no counts",
    )
    exclusive: bool | None = Field(
        _DEFAULTS["exclusive"],
        description="each worker takes a whole idle node: all its GPUs, CPUs and memory "
        "(Slurm's --exclusive)",
    )
    whole_node_memory: bool | None = Field(
        _DEFAULTS["whole_node_memory"],
        description="each worker takes all of its node's memory (Slurm's --mem=0)",
    )
    gres_type: str | None = Field(
        None,
        max_length=SPEC_TEXT["gres_type"],
        description="the site's GPU type name (Slurm's --gres=gpu:TYPE:N), matched on each "
        "node's gres_type (default: the lower-case model family, a100, h100, …)",
    )
    gpu_engines: dict[str, int] | None = Field(
        None,
        description="what each GPU must have beside compute: engines and how many at least "
        "(nvenc, nvdec, nvjpg) or capabilities (graphics, display, fp64: 1), e.g. {nvenc: 1}; "
        "Slurm's --gres=nvenc:N gives N GPUs that have NVENC",
    )
    reservation: str | None = Field(
        None,
        max_length=SPEC_TEXT["reservation"],
        description="the advance reservation to run in (Slurm's --reservation): the job runs "
        "only on its nodes, only while it is active, and only if it names the job's user",
    )
    batch: bool | None = Field(
        _DEFAULTS["batch"],
        description="Slurm's batch job (what an #SBATCH script becomes): the command runs on "
        "worker 0 alone, the other workers hold their nodes for srun; the job ends, and "
        "succeeds or fails, with the command",
    )
    workdir: Annotated[str, _text("workdir")] | None = Field(
        None,
        description="an absolute directory the tasks start in (sbatch's --chdir; the submit "
        "directory for a script); when the job's user cannot enter it there, /tmp, as slurmd "
        "does; default: the user's home",
    )
    output: Annotated[str, _text("output")] | None = Field(
        None,
        description="batch only: the script's stdout file, relative to workdir, with sbatch's "
        "patterns (%j %J %A %a %x %N %u %s %t %n %%, %5j zero-padded); default slurm-%j.out "
        "(slurm-%A_%a.out for an array task)",
    )
    error: Annotated[str, _text("error")] | None = Field(
        None, description="batch only: the script's stderr file (default: with the output)"
    )
    open_mode: Literal["truncate", "append"] | None = Field(
        _DEFAULTS["open_mode"],
        description="batch only: truncate or append to the output files on the first attempt "
        "(a requeued or retried attempt appends)",
    )
    input: Annotated[str, _text("input")] | None = Field(
        None,
        description="batch only: the script's stdin file (sbatch's --input, the same patterns), "
        "relative to workdir; default /dev/null",
    )
    submit_env: Annotated[dict[str, Any], WithJsonSchema(SUBMIT_ENV_SCHEMA)] | None = Field(
        None,
        description="the submitter's environment, captured at submit (sbatch's --export; the "
        "CLI fills it): the base of every task's environment, under env and the launch's own "
        f"variables; at most {MAX_ENV} characters in all; never shown by the API",
    )
    container: (
        Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_IMAGE,
                pattern=IMAGE_PATTERN,
                description="the image alone",
            ),
        ]
        | ContainerIn
        | None
    ) = Field(
        None,
        description="run every task in this container image, with the node's runtime "
        "(apptainer, enroot, podman or docker); pyxis's --container-*",
    )


# models the OpenAPI schema shows for fields that stay plain JSON (name → model, mode)
DOCUMENTED: dict[str, tuple[type[BaseModel], Literal["validation", "serialization"]]] = {}


MARK = "x-gpufleet-model"  # the OpenAPI schema's writer (server/errors.py) makes it a $ref


def documented_as(model: type[BaseModel], mode: Literal["validation", "serialization"]) -> Any:
    """An annotation: the field's schema is ``model``'s (a component of the OpenAPI schema).
    Pydantic resolves a ``$ref`` it did not make itself, so the field carries a mark that the
    OpenAPI schema's writer replaces with the reference."""
    name = str(model.model_config.get("title") or model.__name__)
    DOCUMENTED[name] = (model, mode)
    return WithJsonSchema({MARK: name})
