"""The job spec's published schema (``api/jobspec.JobSpecIn``, what the OpenAPI document and
generated clients show) and the rules of ``JobSpec.from_dict`` (what the controller enforces)
agree: the same keys, the same required one, bounds that from_dict accepts at their edge and
refuses one step past it, the same string lengths, enums and defaults. A change to either
fails here until the other follows."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any, get_args

import pytest

from gpufleet.api.jobspec import JobSpecIn
from gpufleet.api.jobspec_out import JobSpecOut
from gpufleet.api.schemas import JobStateName
from gpufleet.model.errors import SpecError
from gpufleet.model.job import (
    SPEC_TEXT,
    JobSpec,
    JobState,
    TopologyLevel,
    WarningSignal,
)
from gpufleet.model.limits import MAX_QUEUES, SIGNAL_BEFORE_S, SPEC_BOUNDS
from gpufleet.model.secrets import (
    ENV_PATTERN,
    FILE_PATTERN,
    MAX_SECRET_NAME,
    MAX_SECRETS,
    NAME_PATTERN,
    SCOPES,
    SecretRef,
)
from gpufleet.server.store.codec import _SPEC_KEYS, HIDDEN_SPEC_KEYS, spec_from_dict, spec_to_dict

BASE: dict[str, Any] = {"name": "n", "user": "u"}
SCHEMA = JobSpecIn.model_json_schema()
PROPS: dict[str, Any] = SCHEMA["properties"]


def read(**kw: Any) -> JobSpec:
    return JobSpec.from_dict({**BASE, **kw})


def refusal(**kw: Any) -> SpecError:
    with pytest.raises(SpecError) as e:
        read(**kw)
    return e.value


def prop(key: str) -> dict[str, Any]:
    """``key``'s schema; ``outer.inner`` is a key of the object form of ``outer``."""
    if "." not in key:
        return dict(PROPS[key])
    outer, inner = key.split(".")
    [ref] = [b["$ref"] for b in PROPS[outer]["anyOf"] if "$ref" in b]
    return dict(SCHEMA["$defs"][ref.rsplit("/", 1)[1]]["properties"][inner])


def nested(key: str, value: Any) -> dict[str, Any]:
    """The spec keys that give ``key`` the value (a nested key within a valid object)."""
    if "." not in key:
        return {key: value}
    outer, inner = key.split(".")
    assert outer in ("signal", "checkpoint"), key
    return {outer: {"signal": "USR1", inner: value}}


def branch(key: str, json_type: str) -> dict[str, Any]:
    """The part of ``key``'s schema of ``json_type`` (a nullable key is an anyOf)."""
    p = prop(key)
    for b in p.get("anyOf", [p]):
        if b.get("type") == json_type:
            return dict(b)
    raise AssertionError(f"{key}: no {json_type} in {p}")


def test_the_schema_has_the_keys_from_dict_reads() -> None:
    err = refusal(not_a_key=1)
    allowed = err.reason.split("allowed: ")[1].rstrip(")").split(", ")
    assert sorted(PROPS) == sorted(allowed)
    assert SCHEMA["additionalProperties"] is False  # unknown keys: refused by both


def test_name_is_the_one_required_key() -> None:
    assert SCHEMA["required"] == ["name"]
    assert refusal(name=None).field == "name"
    # user is required of the model but filled from the token by the API
    assert read().user == "u"


@pytest.mark.parametrize("key", sorted(SPEC_BOUNDS))
def test_numeric_bounds_agree_at_their_edges(key: str) -> None:
    lo, hi = SPEC_BOUNDS[key]
    json_type = "integer" if isinstance(lo, int) and isinstance(hi, int) else "number"
    if key in ("cpus", "memory_gib", "time_limit_s"):
        json_type = "number"
    b = branch(key, json_type)
    assert (b["minimum"], b["maximum"]) == (lo, hi), (key, b)
    read(**nested(key, lo))
    read(**nested(key, hi))
    if json_type == "integer":
        below, above = lo - 1, hi + 1
    else:
        below, above = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
    for bad in (below, above):
        assert refusal(**nested(key, bad)).field == key, (key, bad)


@pytest.mark.parametrize("key", ["name", "user", "queue", "dataset"])
def test_string_lengths_agree(key: str) -> None:
    s = PROPS[key] if key == "name" else branch(key, "string")
    assert (s["minLength"], s["maxLength"]) == (1, SPEC_TEXT[key])
    read(**{key: "x" * SPEC_TEXT[key]})
    assert refusal(**{key: "x" * (SPEC_TEXT[key] + 1)}).field == key
    assert refusal(**{key: ""}).field == key


def test_command_and_models_and_env_bounds_agree() -> None:
    line = branch("command", "string")
    argv = branch("command", "array")
    assert line["maxLength"] == argv["items"]["maxLength"] == SPEC_TEXT["command"]
    assert argv["minItems"] == 1
    read(command="x" * SPEC_TEXT["command"])
    assert refusal(command="x" * (SPEC_TEXT["command"] + 1)).field == "command"
    assert refusal(command=["a", "x" * (SPEC_TEXT["command"] + 1)]).field == "command[1]"
    assert refusal(command=[]).field == "command"
    assert len(read(command=["a"] * argv["maxItems"]).command) == argv["maxItems"]
    assert refusal(command=["a"] * (argv["maxItems"] + 1)).field == "command"

    models = branch("gpu_models", "array")
    assert models["items"]["maxLength"] == SPEC_TEXT["gpu_models"]
    read(gpu_models=["H100-SXM"] * models["maxItems"])
    assert refusal(gpu_models=["H100-SXM"] * (models["maxItems"] + 1)).field == "gpu_models"
    assert read(gpu_models="H100-SXM|A100-80GB").gpu_models == ("H100-SXM", "A100-80GB")

    env = branch("env", "object")
    names, values = env["propertyNames"], env["additionalProperties"]["anyOf"]
    assert values[0] == {"type": "string", "maxLength": SPEC_TEXT["env"]}
    assert read(env={"K": "v" * SPEC_TEXT["env"], "N": 3, "B": True}).env == (
        ("B", "True"),
        ("K", "v" * SPEC_TEXT["env"]),
        ("N", "3"),
    )
    assert refusal(env={"K": "v" * (SPEC_TEXT["env"] + 1)}).field == "env.K"
    assert names["pattern"] == "^[^=]*$" and refusal(env={"A=B": "x"}).field == "env.A=B"
    assert names["minLength"] == 1 and refusal(env={"": "x"}).field == "env."
    assert names["maxLength"] == 256
    read(env={"k" * names["maxLength"]: "x"})
    assert refusal(env={"k" * (names["maxLength"] + 1): "x"}).field.startswith("env.")
    assert env["maxProperties"] == 1024
    assert refusal(env={f"K{i}": "x" for i in range(env["maxProperties"] + 1)}).field == "env"
    assert refusal(env={"K": ["a"]}).field == "env"  # a value is plain, never a list


def test_topology_enum_agrees_both_ways() -> None:
    levels = JobSpecIn.model_json_schema()["$defs"]["TopologyLevel"]["enum"]
    assert levels == [x.value for x in TopologyLevel]
    for level in levels:
        assert read(topology=level).topology.level.value == level
        assert read(topology={"level": level, "required": True}).topology.required
    assert refusal(topology="rack").field == "topology.level"
    assert refusal(topology={"level": "leaf", "strict": True}).field == "topology.strict"
    shape = JobSpecIn.model_json_schema()["$defs"]["TopologyIn"]
    assert set(shape["properties"]) == {"level", "required"}
    assert shape["additionalProperties"] is False


def test_defaults_agree_with_what_an_absent_key_means() -> None:
    plain = read()
    for key, p in PROPS.items():
        if "default" not in p or key in ("user",):
            continue
        given = read(**{key: p["default"]})
        assert given == plain, (key, p["default"])
        assert read(**{key: None}) == plain, key  # null: the default too


def test_wrong_json_types_are_refused_for_each_typed_key() -> None:
    wrong = {"integer": "1", "number": "1.5", "boolean": "yes", "string": 7}
    for key, p in PROPS.items():
        types = {b.get("type") for b in p.get("anyOf", [p])}
        for t in sorted(types & set(wrong)):
            if ({"string"} <= types and t != "string") or key in ("env", "gpu_models"):
                continue  # a union with a string (gpu_models "A,B", a shell command)
            assert refusal(**{key: wrong[t]}).field.startswith(key), (key, t)


def test_the_schema_matches_no_json_type_from_dict_refuses_to_read() -> None:
    # one whole spec that the schema allows, with every key given, is accepted as it is
    full = {
        "name": "n",
        "user": "u",
        "queue": "q",
        "queues": ["p", "q"],
        "workers": 2,
        "gpus_per_worker": 1,
        "gpu_milli": 500,
        "cpus": 1.5,
        "memory_gib": 2.5,
        "gpu_models": ["H100-SXM"],
        "time_limit_s": 60,
        "priority": -3,
        "preemptible": False,
        "topology": {"level": "leaf", "required": True},
        "dataset": "/data",
        "max_retries": 2,
        "command": ["echo", "hi"],
        "env": {"A": "1"},
        "signal": {"signal": "USR1", "before_s": 90, "batch_only": True},
        "requeue": False,
        "secrets": [{"name": "api-key", "env": "API_KEY"}, {"name": "c", "file": "c.pem"}],
        "distinct_nodes": True,
        "tasks_per_worker": 4,
        "nodelist": "n[1-2]",
        "exclude": ["n3", "n[5-6]"],
        "constraint": "[ib|eth]&nvme",
        "exclusive": True,
        "whole_node_memory": True,
        "gres_type": "a100",
        "gpu_engines": {"nvenc": 1},
        "reservation": "maint",
        "batch": True,
        "workdir": "/home/u/run",
        "output": "out-%j.txt",
        "error": "err-%j.txt",
        "open_mode": "append",
        "input": "in.txt",
        "submit_env": {"PATH": "/venv/bin:/usr/bin"},
        "container": {
            "image": "localhost/app:1",
            "mounts": [{"source": "/data", "target": "/mnt", "read_only": True}],
            "workdir": "/mnt",
        },
        "checkpoint": {"signal": "USR1", "grace_s": 120, "batch_only": True},
        "min_runtime_s": 600,
        "idle_exempt_s": 3600,
        "kill_invalid_dep": True,
        "hold": True,
        "begin_time": 1_800_000_000,
    }
    JobSpecIn.model_validate(full)
    spec = JobSpec.from_dict(full)
    assert set(full) | {"memory_mib"} == set(PROPS)
    assert spec.memory_mib == 2560 and read(memory_mib=2560).memory_mib == 2560
    both = refusal(memory_mib=1, memory_gib=1)  # as the schema's description says
    assert (both.field, both.reason) == ("memory_gib", "give memory_mib or memory_gib, not both")


def shown(spec: JobSpec) -> dict[str, Any]:
    d = spec_to_dict(spec)
    for key in HIDDEN_SPEC_KEYS:
        del d[key]
    return d


def test_the_spec_a_job_shows_is_its_stored_shape() -> None:
    assert set(JobSpecOut.model_fields) == set(_SPEC_KEYS) - set(HIDDEN_SPEC_KEYS)
    spec = replace(read(command=["a"], env={"K": "v"}), time_limit_s=5.0)
    out = JobSpecOut.model_validate(shown(spec))
    assert out.model_dump() == shown(spec)
    assert JobSpecOut.model_validate(BASE).model_dump() == shown(JobSpec("n", "u"))


@pytest.mark.parametrize("key", ["workdir", "output", "error", "input"])
def test_batch_paths_bounds_agree(key: str) -> None:
    s = branch(key, "string")
    assert (s["minLength"], s["maxLength"]) == (1, SPEC_TEXT[key])
    start = "/" if key == "workdir" else ""
    read(batch=True, **{key: start + "x" * (SPEC_TEXT[key] - len(start))})
    assert (
        refusal(batch=True, **{key: start + "x" * (SPEC_TEXT[key] + 1 - len(start))}).field == key
    )


def test_batch_fields_are_checked() -> None:
    assert refusal(workdir="rel/dir").field == "workdir"
    assert refusal(output="o.txt").field == "output"  # the batch script's file: batch only
    assert refusal(input="i.txt").field == "input"
    assert refusal(batch=True, open_mode="sometimes").field == "open_mode"
    assert refusal(open_mode="append").field == "open_mode"
    env = branch("submit_env", "object")
    assert env["additionalProperties"] == {"type": "string", "maxLength": SPEC_TEXT["submit_env"]}
    big = {f"V{i}": "x" * 1000 for i in range(300)}  # about 300 KB: over MAX_ENV
    assert refusal(submit_env=big).field == "submit_env"
    real = {f"V{i}": "x" * 1000 for i in range(100)}  # about 100 KB: a real environment
    assert len(read(submit_env=real).submit_env) == 100


def test_the_warning_signal_agrees_in_both_forms() -> None:
    shape = SCHEMA["$defs"]["SignalIn"]
    assert set(shape["properties"]) == {"signal", "before_s", "batch_only"}
    assert shape["required"] == ["signal"] and shape["additionalProperties"] is False
    assert shape["properties"]["before_s"]["default"] == SIGNAL_BEFORE_S
    assert shape["properties"]["batch_only"]["default"] is False
    usr1 = WarningSignal(10, 90, True)
    assert read(signal="B:USR1@90").signal == usr1
    assert read(signal={"signal": "sigusr1", "before_s": 90, "batch_only": True}).signal == usr1
    assert read(signal={"signal": 10}).signal == WarningSignal(10, SIGNAL_BEFORE_S, False)
    assert read(signal="12").signal == WarningSignal(12, SIGNAL_BEFORE_S, False)
    assert read(signal="term@0").signal == WarningSignal(15, 0, False)
    text = branch("signal", "string")
    assert refusal(signal="U" * (text["maxLength"] + 1)).field == "signal"
    for bad in ("USR3", "B:", "USR1@", "USR1@-1", "USR1@65536", "R:USR1", "65", "0"):
        assert refusal(signal=bad).field == "signal", bad
    for bad_name in ("NOPE", "", True, 1.5):
        assert refusal(signal={"signal": bad_name}).field == "signal.signal", bad_name
    assert refusal(signal={"before_s": 3}).field == "signal.signal"
    assert refusal(signal={"signal": "USR1", "at": 3}).field == "signal.at"
    assert refusal(signal={"signal": "USR1", "batch_only": "yes"}).field == "signal.batch_only"
    # the stored shape reads back as the same spec
    spec = read(signal="B:USR2@30", requeue=False)
    again = JobSpec.from_dict({**BASE, **{k: spec_to_dict(spec)[k] for k in ("signal", "requeue")}})
    assert again == spec


def test_job_states_in_the_schema_are_the_models() -> None:
    assert set(get_args(JobStateName)) == {s.value for s in JobState}


def test_the_secrets_agree_in_both_forms() -> None:
    shape = SCHEMA["$defs"]["SecretRefIn"]
    props = shape["properties"]
    assert set(props) == {"name", "scope", "env", "file"} and shape["required"] == ["name"]
    assert shape["additionalProperties"] is False
    assert branch("secrets", "array")["maxItems"] == MAX_SECRETS
    scopes = next(b for b in props["scope"]["anyOf"] if "enum" in b)["enum"]
    assert tuple(scopes) == SCOPES
    for s in scopes:
        assert read(secrets=[{"name": "k", "scope": s, "env": "K"}]).secrets[0].scope == s
    assert refusal(secrets=[{"name": "k", "scope": "node", "env": "K"}]).field == "secrets[0].scope"
    name = props["name"]
    assert (name["maxLength"], name["pattern"]) == (MAX_SECRET_NAME, NAME_PATTERN)
    read(secrets=[{"name": "k" * MAX_SECRET_NAME, "env": "K"}])
    for bad in ("k" * (MAX_SECRET_NAME + 1), ".hidden", "a/b", "-x", "a b"):
        assert refusal(secrets=[{"name": bad, "env": "K"}]).field == "secrets[0].name", bad
        assert not re.match(NAME_PATTERN, bad) or len(bad) > MAX_SECRET_NAME
    env, file = (
        next(b for b in props[k]["anyOf"] if b.get("type") == "string") for k in ("env", "file")
    )
    assert env["pattern"] == ENV_PATTERN and file["pattern"] == FILE_PATTERN
    for bad in ("1X", "A-B", "A=B"):
        assert refusal(secrets=[{"name": "k", "env": bad}]).field == "secrets[0].env", bad
    for bad in ("..", "a/b", ".k"):
        assert refusal(secrets=[{"name": "k", "file": bad}]).field == "secrets[0].file", bad
    # rules the schema cannot say: one of env and file; no variable set twice
    assert refusal(secrets=[{"name": "k"}]).field == "secrets[0].env"
    assert refusal(secrets=[{"name": "k", "env": "K", "file": "k"}]).field == "secrets[0].file"
    assert refusal(secrets=[{"name": "k", "env": "GPUFLEET_X"}]).field == "secrets[0].env"
    two = [{"name": "a", "env": "K"}, {"name": "b", "env": "K"}]
    assert refusal(secrets=two).field == "secrets[1].env"
    assert refusal(env={"K": "1"}, secrets=two[:1]).field == "secrets[0].env"
    files = [{"name": "a", "file": "f"}, {"name": "b", "file": "f"}]
    assert refusal(secrets=files).field == "secrets[1].file"
    many = [{"name": f"k{i}", "env": f"K{i}"} for i in range(MAX_SECRETS + 1)]
    assert refusal(secrets=many).field == "secrets"
    # the stored shape reads back as the same spec, and JobSpecOut shows it
    spec = read(secrets=[{"name": "a", "scope": "queue", "env": "A"}, {"name": "b", "file": "b"}])
    assert spec.secrets == (SecretRef("a", "queue", "A", ""), SecretRef("b", "", "", "b"))
    assert spec_from_dict(spec_to_dict(spec)) == spec
    assert JobSpecOut.model_validate(shown(spec)).model_dump() == shown(spec)


def test_the_container_agrees_in_both_forms() -> None:
    shape = SCHEMA["$defs"]["ContainerIn"]
    assert set(shape["properties"]) == {"image", "mounts", "workdir"}
    assert shape["required"] == ["image"] and shape["additionalProperties"] is False
    mount = SCHEMA["$defs"]["MountIn"]
    assert set(mount["properties"]) == {"source", "target", "read_only"}
    assert mount["required"] == ["source", "target"]
    image_max = shape["properties"]["image"]["maxLength"]
    path_max = mount["properties"]["source"]["maxLength"]
    mounts_max = branch("container.mounts", "array")["maxItems"]
    ok = read(container={"image": "x" * image_max, "workdir": "/" + "w" * (path_max - 1)})
    assert ok.container is not None and ok.container.mounts == ()
    assert read(container="img:1").container == read(container={"image": "img:1"}).container
    assert refusal(container={"image": "x" * (image_max + 1)}).field == "container.image"
    assert refusal(container={"image": "-v"}).field == "container.image"
    assert refusal(container={"image": "a b"}).field == "container.image"
    assert refusal(container={"mounts": []}).field == "container.image"
    m = {"source": "/a", "target": "/b"}
    assert len(read(container={"image": "i", "mounts": [m] * 1}).container.mounts) == 1  # type: ignore[union-attr]
    many = [{"source": "/a", "target": f"/t{i}"} for i in range(mounts_max + 1)]
    assert refusal(container={"image": "i", "mounts": many}).field == "container.mounts"
    for bad in ("rel", "/a:b", "/a,b", "/a\0b", ""):
        e = refusal(container={"image": "i", "mounts": [{"source": bad, "target": "/t"}]})
        assert e.field == "container.mounts[0].source", bad
    e = refusal(container={"image": "i", "mounts": [{"source": "/s", "target": "/t", "ro": 1}]})
    assert e.field == "container.mounts[0].ro"
    # every problem at once, each named
    e = refusal(container={"mounts": [{"source": "x", "target": "y"}], "workdir": "w", "k": 1})
    assert e.field == "container" and e.reason.startswith("5 problems: ")
    for where in ("container.k", "container.image", "container.workdir", "mounts[0].source"):
        assert where in e.reason, where
    assert "container.mounts[0].target" in e.reason
    # pyxis's comma-separated form, and the stored shape reads back as the same spec
    spec = read(container={"image": "i", "mounts": "/d:/data:ro,/s", "workdir": "/data/"})
    assert spec.container is not None
    assert [m.pyxis() for m in spec.container.mounts] == ["/d:/data:ro", "/s:/s"]
    assert spec.container.workdir == "/data"
    dup = refusal(container={"image": "i", "mounts": "/a:/t,/b:/t/"})
    assert dup.field == "container.mounts" and "same target" in dup.reason
    again = JobSpec.from_dict({**BASE, "container": spec_to_dict(spec)["container"]})
    assert again == spec


def test_the_container_patterns_agree_with_what_from_dict_accepts() -> None:
    import re

    image = SCHEMA["$defs"]["ContainerIn"]["properties"]["image"]["pattern"]
    path = SCHEMA["$defs"]["MountIn"]["properties"]["source"]["pattern"]
    for text in ("ok:1", "docker://nvcr.io#nvidia/x:1", "/s/app.sif", "-v", "a b", "a\tb", "x-"):
        accepted = True
        try:
            read(container={"image": text})
        except SpecError:
            accepted = False
        assert accepted == bool(re.search(image, text)), text
    for text in ("/a", "/a/b c", "/", "a", "/a:b", "/a,b", ""):
        accepted = True
        try:
            read(container={"image": "i", "mounts": [{"source": text, "target": "/t"}]})
        except SpecError:
            accepted = False
        assert accepted == bool(re.search(path, text)), text


def test_the_queues_agree_in_both_forms() -> None:
    # Slurm's -p a,b: a list or one comma-separated string, in the order given
    assert read(queues="a,b").queues == ("a", "b") == read(queues=["a", "b"]).queues
    assert read(queues="a,b").queue == "a"  # the first, until the job starts
    assert read(queues="a,b", queue="b").queue == "b"  # one of them (a started job's record)
    assert read(queues=["a"]) == read(queue="a")  # one queue is just ``queue``
    assert read(queues=None) == read()
    assert read(queues="a,b").partitions == ("a", "b")
    assert replace(read(queues="a,b"), queue="b").partitions == ("b", "a")
    assert read(queue="x").partitions == ("x",)
    assert refusal(queues="a,b", queue="c").field == "queue"
    # every problem at once, naming the field
    bad = refusal(queues=["a", "a", "", "b,c"])
    assert bad.field == "queues"
    assert "'a' is named twice" in bad.reason and "comma" in bad.reason, bad.reason
    assert refusal(queues=[]).field == "queues"
    assert refusal(queues=[1]).field == "queues"
    many = [f"q{i}" for i in range(MAX_QUEUES + 1)]
    read(queues=many[:MAX_QUEUES])
    assert refusal(queues=many).field == "queues"
    long = "x" * (SPEC_TEXT["queues"] + 1)
    assert refusal(queues=["a", long]).field == "queues[1]"
    items = branch("queues", "array")
    assert items["maxItems"] == MAX_QUEUES and items["minItems"] == 1
    assert items["items"]["maxLength"] == SPEC_TEXT["queues"]
    # stored and read back as the same spec
    spec = read(queues="a,b")
    assert spec_from_dict(spec_to_dict(spec)) == spec
    assert spec_from_dict(spec_to_dict(read())).queues == ()
