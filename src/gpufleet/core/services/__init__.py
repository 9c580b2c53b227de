"""The ServiceMaster: every service's replicas, kept alive, routed, rolled and scaled.

A package of small modules: ``autoscale`` (a pure function of the load), ``records`` (what the
store holds and what the master keeps in memory), ``rules`` (the reconcile and its helpers)
and ``master`` (the events).

Pure like the rest of the core: events in (``ServiceCreated``, ``ServiceUpdated``,
``ServiceScaled``, ``ServiceDeleted``, ``ReplicaProbe``, ``ServiceLoad``, its ``"service"``
timers, and the Transitions of its replica jobs, which the Controller hands on), commands out
(``ReplicaAdded``, ``Routes``, ``ServiceEvent``, ``ServiceRecord``, ``SetTimer``, and through the
JobMaster the replica jobs' own Transitions, Launches and Kills). The clock is the event's
``now``.

Each replica is a job the JobMaster runs like any other (scheduling, placement, Reasons,
secrets, containers, fencing all apply): one worker, no time limit, no retries of its own. Its id
is ``<service>.<n>`` (a service name has no '.', so it never meets a stored job's id). The
rules, all in ``rules.ReplicaRules._reconcile`` (idempotent: a timer or a tick may run it at any
time):

- **alive**: the desired count of replicas of the current generation exists; one that ends
  (any exit, a liveness failure, a user's cancel) is a failure and is replaced once the back-off
  has passed: ``base_s`` doubled per failure in a row, at most ``max_s``; a replica that failed
  after staying ready ``reset_s`` starts the count again. After ``avoid_node_after`` failures in
  a row on one node, replacements get that node in their ``exclude``. A lost node or a
  preemption is no failure: the JobMaster requeues the replica's job, as any job's.
- **ready**: a replica is ready once its job runs and, with a readiness probe, its probe runner
  said so; ``Routes`` (node and port of each ready replica) go out whenever that set changes,
  before the Kills of the replicas that leave it (the gateway drains them first).
- **scale**: surplus replicas go not-ready first, then the newest.
- **rolling update**: a changed replica (template, port, probes) is a new generation; new
  replicas are added at most ``max_surge`` above the desired count, old ones stopped only while
  the ready ones stay at least ``max_unavailable`` below it (old not-ready ones first, they serve
  nothing). The rollout **failed** when no new replica became ready for ``progress_deadline_s``
  (Kubernetes' progressDeadlineSeconds: from the update, or from the last new replica that
  became ready) or new replicas failed ``max_failures`` times: it rolls back by itself (the
  previous generation becomes the current one again and the same rules replace the new
  replicas).
- **autoscale**: ``desired_replicas`` over the load history (a pure function).
"""

from gpufleet.core.services.autoscale import desired_replicas, wanted
from gpufleet.core.services.master import ServiceMaster
from gpufleet.core.services.records import (
    MAX_LOAD_SAMPLES,
    REPLICA_PORT_BASE,
    REPLICA_PORT_SPAN,
    SUSPECT_PORT_S,
    TIMER,
    Replica,
    RestoredReplica,
    RestoredService,
    Service,
)

__all__ = [
    "MAX_LOAD_SAMPLES",
    "REPLICA_PORT_BASE",
    "REPLICA_PORT_SPAN",
    "SUSPECT_PORT_S",
    "TIMER",
    "Replica",
    "RestoredReplica",
    "RestoredService",
    "Service",
    "ServiceMaster",
    "desired_replicas",
    "wanted",
]
