"""How ``ServiceSpec.from_dict`` and ``Probe.from_dict`` read a spec: a reader that collects
every problem (path, message) before it refuses, one method per part of the spec."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from gpufleet.model.errors import SpecError, each
from gpufleet.model.job import JobSpec
from gpufleet.model.service import (
    GEOMETRY,
    MAX_DELAY_S,
    MAX_QPS,
    MAX_REPLICAS,
    MAX_THRESHOLD,
    NAME,
    Amount,
    Autoscale,
    Backoff,
    Desktop,
    Probe,
    Rollout,
    ServiceSpec,
    ServiceSpecError,
)
from gpufleet.model.validate import MAX_ARG, MAX_COMMAND, MAX_ITEMS, MAX_TEXT, Fields

T = TypeVar("T")


def read_service(data: Any, *, source: str = "request", path: str = "") -> ServiceSpec:
    return _Reader(source).spec(data, path)


def read_probe(data: Any, *, kind: str, source: str, path: str) -> Probe:
    if kind not in ("readiness", "liveness"):
        raise SpecError(
            f"a probe is a readiness or a liveness probe, not {kind!r}",
            source=source,
            field=path,
        )
    r = _Reader(source)
    holder = Fields({kind: data}, source=source, path=path)
    probe = r.probe(holder, kind)
    if probe is None and not r.problems:
        r.problems.append((holder.field(kind), "is required (http, tcp or command)"))
    if probe is not None and kind == "liveness" and probe.success_threshold != 1:
        r.problems.append(
            (holder.field("liveness.success_threshold"), "must be 1 for a liveness probe")
        )
    if r.problems:
        raise _refusal(r.problems, source, path)
    assert probe is not None
    return probe


def _refusal(problems: list[tuple[str, str]], source: str, path: str) -> SpecError:
    if len(problems) == 1:
        where, msg = problems[0]
        return ServiceSpecError(msg, problems, source=source, field=where)
    said = "; ".join(f"{where}: {msg}" if where else msg for where, msg in problems)
    return ServiceSpecError(
        f"{len(problems)} problems: {said}", problems, source=source, field=path
    )


class _Reader:
    """Reads a service spec, collecting every problem (path, message) before it refuses."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[tuple[str, str]] = []

    def get(self, read: Callable[[], T], default: T) -> T:
        try:
            return read()
        except SpecError as e:
            self.problems += [(x.field, x.reason) for x in each(e)]
            return default

    def fields(self, data: Any, path: str) -> Fields | None:
        return self.get(lambda: Fields(data, source=self.source, path=path), None)

    def finish(self, f: Fields) -> None:
        unknown = sorted(str(k) for k in f.data if k not in f._seen)
        for k in unknown:
            self.problems.append(
                (f.field(k), f"unknown key (allowed: {', '.join(sorted(f._seen))})")
            )

    def spec(self, data: Any, path: str) -> ServiceSpec:
        f = Fields(data, source=self.source, path=path)  # not a mapping: nothing else to say
        name = self.get(lambda: f.text("name", required=True, max_len=63), "")
        if name and not NAME.match(name):
            self.problems.append(
                (
                    f.field("name"),
                    "must be 1-63 lowercase letters, digits and '-', starting "
                    f"and ending with a letter or digit; got {name!r}"[:300],
                )
            )
        port = self.get(lambda: f.integer("port", 0, minimum=1, maximum=65535), 0)
        replicas_given = f.has("replicas")
        replicas = self.get(lambda: f.integer("replicas", 1, minimum=0, maximum=MAX_REPLICAS), 1)
        autoscale = self.autoscale(f)
        if autoscale is not None and not replicas_given:
            replicas = autoscale.min
        replica = self.replica(f, name)
        readiness = self.probe(f, "readiness")
        liveness = self.probe(f, "liveness")
        if liveness is not None and liveness.success_threshold != 1:
            self.problems.append(
                (f.field("liveness.success_threshold"), "must be 1 for a liveness probe")
            )
        rollout = self.rollout(f)
        restart = self.backoff(f)
        desktop = self.desktop(f)
        if desktop is not None and (autoscale is not None or replicas > 1):
            self.problems.append(
                (f.field("desktop"), "a desktop is one replica (0 when suspended), no autoscale")
            )
        self.finish(f)
        if self.problems:
            raise _refusal(self.problems, self.source, path)
        assert replica is not None
        return ServiceSpec(
            name,
            replica,
            port,
            replicas,
            autoscale,
            readiness,
            liveness,
            rollout,
            restart,
            desktop,
        )

    def desktop(self, f: Fields) -> Desktop | None:
        raw = f.raw("desktop")
        if raw is None:
            return None
        d = self.fields(raw, f.field("desktop"))
        if d is None:
            return None
        idle = self.get(
            lambda: d.number("idle_suspend_s", 1800.0, minimum=1, maximum=MAX_DELAY_S), 1800.0
        )
        geometry = self.get(lambda: d.text("geometry", max_len=9), "") or "1280x800"
        if not GEOMETRY.match(geometry):
            self.problems.append(
                (d.field("geometry"), f"must be WIDTHxHEIGHT (100-9999 each), got {geometry!r}")
            )
        self.finish(d)
        return Desktop(idle, geometry)

    def autoscale(self, f: Fields) -> Autoscale | None:
        keys = ("min", "max", "target_qps_per_replica", "upscale_delay_s", "downscale_delay_s")
        given = [k for k in keys if f.has(k)]
        for k in keys:
            f.raw(k)  # marked as read
        if not given:
            return None
        lo = self.get(lambda: f.integer("min", 1, minimum=0, maximum=MAX_REPLICAS), 1)
        hi = self.get(lambda: f.integer("max", minimum=1, maximum=MAX_REPLICAS), lo or 1)
        target = self.get(lambda: f.number("target_qps_per_replica", maximum=MAX_QPS), 1.0)
        if target <= 0 and f.has("target_qps_per_replica"):
            self.problems.append((f.field("target_qps_per_replica"), "must be above 0"))
        up = self.get(
            lambda: f.number("upscale_delay_s", 30.0, minimum=0, maximum=MAX_DELAY_S), 0.0
        )
        down = self.get(
            lambda: f.number("downscale_delay_s", 600.0, minimum=0, maximum=MAX_DELAY_S), 0.0
        )
        if lo > hi:
            self.problems.append((f.field("min"), f"must be at most max ({hi}), got {lo}"))
        if f.has("replicas"):
            n = f.data["replicas"]
            if isinstance(n, int) and not isinstance(n, bool) and not lo <= n <= hi:
                self.problems.append(
                    (f.field("replicas"), f"must be within min and max ({lo}-{hi}), got {n}")
                )
        return Autoscale(lo, hi, target if target > 0 else 1.0, up, down)

    def replica(self, f: Fields, name: str) -> JobSpec | None:
        raw = f.raw("replica")
        if raw is None:
            self.problems.append((f.field("replica"), "is required (the replica's job spec)"))
            return None
        if not isinstance(raw, dict):
            self.problems.append(
                (f.field("replica"), f"must be a mapping, got {type(raw).__name__}")
            )
            return None
        at = f.field("replica")
        refused = {
            "workers": "a replica is one worker (scale with replicas)",
            "time_limit_s": "a replica has no time limit (the service keeps it running)",
            "max_retries": "a replica is not retried; the service replaces it (restart_backoff)",
            "batch": "a replica is not a batch job",
            "nodelist": "the service places its replicas (use constraint or exclude)",
            "signal": "a replica has no time limit to warn of",
            "distinct_nodes": "a replica is one worker",
        }
        data = dict(raw)
        for k, why in refused.items():
            if data.get(k) not in (None, {"workers": 1, "batch": False}.get(k)):
                self.problems.append((f"{at}.{k}", why))
            data.pop(k, None)
        data.setdefault("name", name or "service")
        spec = self.get(lambda: JobSpec.from_dict(data, source=self.source, path=at), None)
        if spec is not None and not spec.command and spec.container is None:
            self.problems.append((f"{at}.command", "is required (what a replica runs)"))
        return spec

    def probe(self, f: Fields, key: str) -> Probe | None:
        raw = f.raw(key)
        if raw is None:
            return None
        p = self.fields(raw, f.field(key))
        if p is None:
            return None
        kinds = [k for k in ("http", "tcp", "command") if p.has(k)]
        for k in ("http", "tcp", "command"):
            p.raw(k)
        if len(kinds) != 1:
            self.problems.append(
                (
                    p.path,
                    "needs exactly one of http, tcp or command"
                    + (f" (got {', '.join(kinds)})" if kinds else ""),
                )
            )
        kind = kinds[0] if kinds else "tcp"
        path: str = "/"
        port: int | None = None
        command: tuple[str, ...] = ()
        if not kinds:
            pass  # refused above: nothing kind-specific to read
        elif kind == "http":
            h = self.fields(p.data["http"], p.field("http"))
            if h is not None:
                path = self.get(lambda: h.text("path", "/", max_len=MAX_TEXT), "/")
                if not path.startswith("/"):
                    self.problems.append((h.field("path"), f"must start with '/', got {path!r}"))
                elif any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in path):
                    # it is written into a request line: no room for a second header
                    self.problems.append(
                        (h.field("path"), "must have no spaces or control characters")
                    )
                port = self.get(lambda: h.integer("port", 0, minimum=1, maximum=65535), 0) or None
                self.finish(h)
        elif kind == "tcp":
            t = self.fields(p.data["tcp"], p.field("tcp"))
            if t is not None:
                port = self.get(lambda: t.integer("port", 0, minimum=1, maximum=65535), 0) or None
                self.finish(t)
        else:
            command = self.command(p)
        initial = self.get(
            lambda: p.number("initial_delay_s", 0.0, minimum=0, maximum=MAX_DELAY_S), 0.0
        )
        period = self.get(lambda: p.number("period_s", 10.0, minimum=0, maximum=MAX_DELAY_S), 10.0)
        timeout = self.get(lambda: p.number("timeout_s", 1.0, minimum=0, maximum=MAX_DELAY_S), 1.0)
        for k, v in (("period_s", period), ("timeout_s", timeout)):
            if v <= 0 and p.has(k):
                self.problems.append((p.field(k), "must be above 0"))
        fail = self.get(
            lambda: p.integer("failure_threshold", 3, minimum=1, maximum=MAX_THRESHOLD), 3
        )
        ok = self.get(
            lambda: p.integer("success_threshold", 1, minimum=1, maximum=MAX_THRESHOLD), 1
        )
        self.finish(p)
        return Probe(
            kind, path, port, command, initial, max(period, 1e-3), max(timeout, 1e-3), fail, ok
        )

    def command(self, p: Fields) -> tuple[str, ...]:
        items = p.data["command"]
        at = p.field("command")
        if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
            self.problems.append((at, "must be a non-empty list of strings (an argv)"))
            return ()
        if len(items) > MAX_ITEMS:
            self.problems.append((at, f"must have at most {MAX_ITEMS} arguments"))
            return ()
        for i, x in enumerate(items):
            try:
                p.checked(f"command[{i}]", x, MAX_ARG)
            except SpecError as e:
                self.problems.append((e.field, e.reason))
        if sum(len(x) for x in items) > MAX_COMMAND:
            self.problems.append((at, f"must be at most {MAX_COMMAND} characters in all"))
        return tuple(items)

    def amount(self, r: Fields, key: str, default: Amount) -> Amount:
        raw = r.raw(key)
        if raw is None:
            return default
        at = r.field(key)
        digits = raw[:-1].strip() if isinstance(raw, str) and raw.endswith("%") else ""
        if digits.isascii() and digits.isdigit():  # not int()'s other digits ('²')
            pct = int(digits)
            if pct <= 100:
                return Amount(pct, True)
            self.problems.append((at, f"a percentage must be 0% to 100%, got {raw!r}"))
            return default
        if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= MAX_REPLICAS:
            return Amount(raw)
        self.problems.append(
            (
                at,
                f"must be a count (0-{MAX_REPLICAS}) or a percentage such as '25%', got {raw!r}"[
                    :200
                ],
            )
        )
        return default

    def rollout(self, f: Fields) -> Rollout:
        raw = f.raw("rollout")
        if raw is None:
            return Rollout()
        r = self.fields(raw, f.field("rollout"))
        if r is None:
            return Rollout()
        d = Rollout()
        surge = self.amount(r, "max_surge", d.max_surge)
        unavailable = self.amount(r, "max_unavailable", d.max_unavailable)
        if surge.value == 0 and unavailable.value == 0:
            self.problems.append(
                (r.field("max_unavailable"), "max_surge and max_unavailable cannot both be 0")
            )
        deadline = self.get(
            lambda: r.number("progress_deadline_s", 600.0, minimum=1, maximum=MAX_DELAY_S), 600.0
        )
        failures = self.get(lambda: r.integer("max_failures", 3, minimum=1, maximum=1000), 3)
        self.finish(r)
        return Rollout(surge, unavailable, deadline, failures)

    def backoff(self, f: Fields) -> Backoff:
        raw = f.raw("restart_backoff")
        if raw is None:
            return Backoff()
        b = self.fields(raw, f.field("restart_backoff"))
        if b is None:
            return Backoff()
        base = self.get(lambda: b.number("base_s", 10.0, minimum=0, maximum=MAX_DELAY_S), 10.0)
        top = self.get(lambda: b.number("max_s", 300.0, minimum=0, maximum=MAX_DELAY_S), 300.0)
        if base > top:
            self.problems.append(
                (b.field("max_s"), f"must be at least base_s ({base:g}), got {top:g}")
            )
        reset = self.get(lambda: b.number("reset_s", 600.0, minimum=0, maximum=MAX_DELAY_S), 600.0)
        avoid = self.get(lambda: b.integer("avoid_node_after", 3, minimum=1, maximum=1000), 3)
        self.finish(b)
        return Backoff(base, max(top, base), reset, avoid)
