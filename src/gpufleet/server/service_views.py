"""A service as the API shows it (``api.services.ServiceOut``): its counts, its replicas with
their jobs' states, nodes, ports and probe states, and its recent history."""

from __future__ import annotations

import functools
import socket
from collections.abc import Sequence

from gpufleet.api import services as a
from gpufleet.core.controller import Controller
from gpufleet.core.services import Replica, Service
from gpufleet.gateway.viewers import LOGIN
from gpufleet.model.job import JobState
from gpufleet.server.store.services import ServiceEventRecord

S = JobState


def replica_out(
    svc: Service, r: Replica, ctrl: Controller, serving: frozenset[str] | None = None
) -> a.ReplicaOut:
    rec = ctrl.jobs.get(r.job_id)
    state = rec.job.state if rec is not None else S.PENDING
    running = state is S.RUNNING
    spec = svc.specs.get(r.generation, svc.spec)
    ready = r.live and r.ready_since is not None and running
    readiness: a.ProbeState
    if spec.readiness is None:
        readiness = "none"
    elif r.ready_since is not None:
        readiness = "passing"
    else:
        readiness = "failing" if running and r.live and r.node else "waiting"
    liveness: a.ProbeState
    if spec.liveness is None:
        liveness = "none"
    elif r.failed:
        liveness = "failed"
    else:
        # the agent's probe runner reports only a failure: running and not failed passes
        liveness = "passing" if running else "waiting"
    return a.ReplicaOut(
        job_id=r.job_id,
        generation=r.generation,
        index=r.index,
        state=state.value,
        node=r.node or None,
        port=r.port or None,
        ready=ready,
        routed=None if serving is None else r.job_id in serving,
        readiness=readiness,
        liveness=liveness,
        stopping=r.stopping,
        failed=r.failed,
        created=r.created,
    )


def request_rate(svc: Service) -> float | None:
    return svc.load[-1][1] if svc.load else None


@functools.cache
def _this_host() -> str:
    """This host's name (a DNS lookup: once, not per service shown)."""
    return socket.getfqdn()


def endpoint_out(host: str, port: int, token: str | None = None) -> a.EndpointOut:
    """``host``: where the gateway listens; a wildcard address is named by this host's name,
    which is what a client elsewhere can reach."""
    if host in ("0.0.0.0", "::", ""):
        host = _this_host()
    shown = f"[{host}]" if ":" in host else host
    return a.EndpointOut(url=f"http://{shown}:{port}", host=host, port=port, token=token)


def service_out(
    svc: Service,
    ctrl: Controller,
    events: Sequence[ServiceEventRecord] | None = None,
    endpoint: a.EndpointOut | None = None,
    serving: frozenset[str] | None = None,
) -> a.ServiceOut:
    """``serving``: the replicas the gateway's proxy sends requests to (None: no gateway)."""
    spec = svc.spec
    replicas = [
        replica_out(svc, r, ctrl, serving)
        for r in sorted(svc.replicas.values(), key=lambda r: r.index)
    ]
    auto = spec.autoscale
    return a.ServiceOut(
        name=svc.name,
        user=spec.replica.user,
        queue=spec.replica.queue,
        generation=svc.generation,
        desired=svc.desired,
        live=sum(1 for r in svc.replicas.values() if r.live),
        ready=sum(1 for r in replicas if r.ready),
        port=spec.port or None,
        image=spec.replica.container.image if spec.replica.container is not None else None,
        command=list(spec.replica.command),
        autoscale=None
        if auto is None
        else {
            "min": auto.min,
            "max": auto.max,
            "target_qps_per_replica": auto.target_qps_per_replica,
        },
        request_rate=request_rate(svc),
        rolling_out=svc.rollout_since is not None,
        previous_generation=svc.previous,
        deleting=svc.deleting,
        note=svc.note,
        spec=spec.to_dict(),
        replicas=replicas,
        events=None
        if events is None
        else [a.ServiceEventOut(time=e.time, what=e.what, why=e.why) for e in events],
        endpoint=endpoint,
        desktop=None
        if spec.desktop is None
        else a.DesktopOut(
            suspended=svc.desired == 0 and not svc.deleting,
            idle_suspend_s=spec.desktop.idle_suspend_s,
            geometry=spec.desktop.geometry,
            open_url=None if endpoint is None else endpoint.url + LOGIN,
        ),
    )
