"""Which tests pytest-xdist keeps on one worker (``--dist loadgroup``).

A test that shares something costly or global with other tests runs on the worker that holds
it, in an ``xdist_group`` named after it:

* a cluster, a browser or another fixture of module or session scope defined in this suite:
  its tests stay together, so each such fixture starts once per run, not once per worker
  (a session-scoped one ends after the last of them, ``end_unused_session_fixtures``);
* whatever a test marks itself (``@pytest.mark.xdist_group("NAME")``, for a global resource
  of its own): its mark wins over the groups above.

Everything else (the bulk of the suite, each test with its own tmp dir, free ports and
database) is handed to whichever worker is free."""

from __future__ import annotations

import pytest

# fixtures of wider scope that are cheap (data, not processes): not worth a group (the Philly
# rows: 0.2 s to read on each worker, where one group ran the five LAS replays one after another)
CHEAP = frozenset({"faults", "faulty_spec", "philly_rows"})

# fixtures whose tests must all run on one worker, in the group named here: a worker's pool of
# real Slurms (tests/support/slurm_local.py) gives the shared Slurm and the own ones ports of
# their own, the same on every worker
ONE_GROUP = {"shared_slurm": "slurm-local", "slurms": "slurm-own"}

# (Ports are no reason for a group: each local cluster claims blocks of its own for its
# replicas, its endpoints and what its jobs' numbers decide, MASTER_PORT and srun's step
# daemons: ops/portblocks.py, --replica-ports, --gateway-ports, --job-ports.)


def shared_fixtures(item: pytest.Item) -> list[str]:
    """What ``item`` shares: its module, where it uses a module-scoped fixture of the suite
    (a module's tests keep their cluster together), and each session-scoped one by name."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    shared = set()
    for name, defs in info.name2fixturedefs.items():
        d = defs[-1]
        if not d.baseid or name in CHEAP:  # a plugin's (tmp_path_factory) or a cheap one
            continue
        if d.scope in ("module", "package"):
            shared.add(item.nodeid.split("::")[0])
        elif d.scope == "session":
            shared.add(f"{d.baseid}::{name}")
    return sorted(shared)


def assign_groups(items: list[pytest.Item]) -> None:
    for item in items:
        one = {ONE_GROUP[f] for f in getattr(item, "fixturenames", ()) if f in ONE_GROUP}
        mark = item.get_closest_marker("xdist_group")
        if one:
            if len(one) > 1:
                raise pytest.UsageError(f"{item.nodeid}: in more than one group: {sorted(one)}")
            (group,) = one
            if mark is not None and mark.args[:1] != (group,):
                raise pytest.UsageError(f"{item.nodeid}: its group must be {group!r}")
            if mark is None:
                item.add_marker(pytest.mark.xdist_group(group))
            continue
        if mark is not None:
            continue
        shared = shared_fixtures(item)
        if shared:
            item.add_marker(pytest.mark.xdist_group("+".join(shared)))


def end_unused_session_fixtures(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After ``item``'s teardown: a session-scoped fixture of this suite (a cluster of
    processes) that ``item`` used and the next test on this worker does not is ended now,
    not when the worker ends (its group's tests run one after another: an idle 4-node cluster
    costs ~9 % of a core). A later test that asks for it again starts it again."""
    if nextitem is None:  # the session is ending: pytest ends them all
        return
    info = getattr(item, "_fixtureinfo", None)
    request = getattr(item, "_request", None)
    if info is None or request is None:
        return
    wanted = set(getattr(nextitem, "fixturenames", ()))
    for name, defs in info.name2fixturedefs.items():
        d = defs[-1]
        if d.scope != "session" or not d.baseid or name in CHEAP or name in wanted:
            continue
        if d.cached_result is not None:
            d.finish(request)


def longest_first(items: list[pytest.Item]) -> None:
    """The ``slow`` tests first, then the groups' chains (one worker runs each chain alone),
    then the rest: xdist hands out work in this order, so the long ones start at once and the
    short ones fill the workers around them, instead of one long test ending the run."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow") is not None:
            return 0
        return 1 if item.get_closest_marker("xdist_group") is not None else 2

    items.sort(key=rank)  # stable: within a rank, the order pytest collected
