"""Which tests pytest-xdist keeps on one worker (``--dist loadgroup``).

A test that shares something costly or global with other tests runs on the worker that holds
it, in an ``xdist_group`` named after it:

* a cluster, a browser or another fixture of module or session scope defined in this suite:
  its tests stay together, so each such fixture starts once per run, not once per worker;
* ports that live clusters derive alike (``PORT_GROUPS``), except for a test marked
  ``no_fixed_ports`` (its own cluster, and jobs that listen on nothing): it is grouped as any
  other test is, so a long one does not lengthen its module's chain;
* whatever a test marks itself (``@pytest.mark.xdist_group("NAME")``, for a global resource
  of its own): its mark wins over the groups above.

Everything else (the bulk of the suite, each test with its own tmp dir, free ports and
database) is handed to whichever worker is free."""

from __future__ import annotations

import pytest

# fixtures of wider scope that are cheap (data, not processes): not worth a group (the Philly
# rows: 0.2 s to read on each worker, where one group ran the five LAS replays one after another)
CHEAP = frozenset({"faults", "faulty_spec", "philly_rows"})

# Live clusters on one loopback bind ports their controllers derive alike: a job's number
# gives its step daemons' and MASTER_PORT (every cluster's job 1 gets the same). (Replica
# ports are not among them: each local cluster claims a block of its own, ops/portblocks.py.)
# The modules that bind them run one after the other, on one worker (ports.py says more).
# Not test_srun.py: its step daemons and MASTER_PORT are free ports of the ephemeral range
# (slurmnodes.fake_job), below which all the ports above lie.
PORT_GROUPS = {
    "job-ports": (
        "test_alloc_live.py",
        "test_doctor_live.py",
        "test_live_cluster.py",
        "test_slurm_shims_live.py",
        "test_srun_live.py",
    ),
}
_PORT_GROUP = {module: group for group, modules in PORT_GROUPS.items() for module in modules}


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
        if item.get_closest_marker("xdist_group") is not None:
            continue
        port_group = _PORT_GROUP.get(item.path.name)
        if port_group is not None and item.get_closest_marker("no_fixed_ports") is None:
            item.add_marker(pytest.mark.xdist_group(port_group))
            continue
        shared = shared_fixtures(item)
        if shared:
            item.add_marker(pytest.mark.xdist_group("+".join(shared)))


def longest_first(items: list[pytest.Item]) -> None:
    """The ``slow`` tests first, then the port groups' chains (one worker runs each chain
    alone), then the rest: xdist hands out work in this order, so the long ones start at once
    and the short ones fill the workers around them, instead of one long test ending the run."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow") is not None:
            return 0
        return 1 if item.path.name in _PORT_GROUP else 2

    items.sort(key=rank)  # stable: within a rank, the order pytest collected
