"""The services as ``/metrics`` shows them: per service its replicas by state, the desired and
ready counts, its generation, and the request rate of the gateway's last report
(``ServiceLoad``). Worked out from the ServiceMaster at each scrape: O(replicas)."""

from __future__ import annotations

from gpufleet.core.controller import Controller
from gpufleet.model.job import JobState
from gpufleet.server.metrics.text import Family, Labels

# every state a replica can be in while it exists, so that each series stays (at 0)
REPLICA_STATES = ("pending", "starting", "running", "preempted", "node_lost", "stopping")


def service_families(ctrl: Controller) -> list[Family]:
    replicas = Family(
        "gpufleet_service_replicas",
        "gauge",
        "A service's replicas by state (the replica job's; 'stopping': being stopped).",
    )
    desired = Family(
        "gpufleet_service_desired_replicas", "gauge", "The replicas a service should have."
    )
    ready = Family(
        "gpufleet_service_ready_replicas", "gauge", "A service's replicas that get traffic."
    )
    generation = Family(
        "gpufleet_service_generation", "gauge", "A service's current generation (its updates)."
    )
    rate = Family(
        "gpufleet_service_request_rate",
        "gauge",
        "A service's request rate (requests/s) as its gateway last measured it.",
    )
    for name in sorted(ctrl.services.services):
        svc = ctrl.services.services[name]
        counts = dict.fromkeys(REPLICA_STATES, 0)
        n_ready = 0
        for r in svc.replicas.values():
            rec = ctrl.jobs.get(r.job_id)
            state = rec.job.state if rec is not None else JobState.PENDING
            key = "stopping" if not r.live else state.value.lower()
            if key in counts:
                counts[key] += 1
            if r.live and r.ready_since is not None and state is JobState.RUNNING:
                n_ready += 1
        one = Labels((("service", name),))
        for state_name, c in counts.items():
            replicas.add(Labels((("service", name), ("state", state_name))), c)
        desired.add(one, svc.desired)
        ready.add(one, n_ready)
        generation.add(one, svc.generation)
        if svc.load:
            rate.add(one, svc.load[-1][1])
    return [replicas, desired, ready, generation, rate]
