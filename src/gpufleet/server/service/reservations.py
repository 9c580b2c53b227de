"""The controller service's requests about advance reservations (maintenance windows), as
Slurm's ``scontrol create|show|delete reservation``: each is checked here, stored with its audit
entry (one transaction), then handed to the core as an event (the next pass honours it).
``ControllerService`` inherits these; the router stays thin."""

from __future__ import annotations

from gpufleet.api.reservations import ReservationCreate, ReservationOut
from gpufleet.core.events import ReservationRemoved, ReservationSet
from gpufleet.model import hostlist
from gpufleet.model.reservation import NodeReservation
from gpufleet.server.auth import Principal
from gpufleet.server.refusals import Conflict, Invalid, NotFound
from gpufleet.server.service.requests import Requests
from gpufleet.server.store.reservations import to_dict


class ReservationRequests(Requests):
    def reservations(self) -> list[NodeReservation]:
        """Every stored reservation, by name (ended ones too, until removed)."""
        self.down.check()
        return self.store.reservations()

    def active_reservation(self, node: str) -> NodeReservation | None:
        """The reservation whose window is open on ``node`` now (None: none)."""
        now = self.clock.now()
        for r in self.ctrl.state.reservations.values():
            if r.active(now) and node in r.nodes:
                return r
        return None

    def reservation(self, name: str) -> NodeReservation:
        for r in self.reservations():
            if r.name == name:
                return r
        raise NotFound(f"no reservation {name} (see 'gpufleet reserve ls')")

    async def create_reservation(self, body: ReservationCreate, who: Principal) -> NodeReservation:
        """Checked (its nodes exist, its window has not ended, its name is free, it overlaps no
        other reservation on a node), stored with its audit entry, then given to the core."""
        self.down.check()
        now = self.clock.now()
        try:
            names = hostlist.expand(body.nodes)
        except ValueError as e:
            raise Invalid(f"nodes: {e}") from None
        names = list(dict.fromkeys(n for n in names if n))
        unknown = [n for n in names if n not in self.ctrl.nodes]
        if unknown:
            raise Invalid(f"nodes: no node {hostlist.compress(unknown)} (see 'gpufleet nodes')")
        end = body.start + body.duration_s
        if end <= now:
            raise Invalid("the window would have ended already: give a later start")
        stored = self.store.reservations()
        name = body.name or _next_name(who.name, {r.name for r in stored})
        for r in stored:
            if r.name == name:
                raise Conflict(f"reservation {name} exists already")
            both = set(r.nodes) & set(names)
            if both and r.end > now and r.start < end and body.start < r.end:
                raise Conflict(
                    f"{hostlist.compress(sorted(both))} already reserved by {r.name} "
                    "at that time: reservations of one node may not overlap"
                )
        new = NodeReservation(
            name, tuple(names), body.start, end, tuple(body.users), body.maint, who.name
        )
        audit = (who.name, who.role, "reservation.create", name, to_dict(new))
        self.store.put_reservation(new, now=now, audit=audit)
        await self.event(ReservationSet(new))
        return new

    async def remove_reservation(self, name: str, who: Principal) -> None:
        self.down.check()
        self.reservation(name)  # 404 for one that does not exist
        now = self.clock.now()
        self.store.delete_reservation(
            name, now=now, audit=(who.name, who.role, "reservation.delete", name, {})
        )
        await self.event(ReservationRemoved(name))

    def reservation_view(self, r: NodeReservation) -> ReservationOut:
        now = self.clock.now()
        nodes = set(r.nodes)
        crossing = sorted(
            j.id
            for j in self.ctrl.running.values()
            if r.end > now
            and (j.expected_end is None or j.expected_end > r.start)
            and any(p.node in nodes for p in j.allocation)
        )
        return ReservationOut(
            name=r.name,
            nodes=r.hostlist,
            node_count=len(r.nodes),
            start=r.start,
            end=r.end,
            duration_s=r.duration_s,
            users=list(r.users),
            maint=r.maint,
            state=r.state(now),
            created_by=r.created_by,
            jobs_crossing=crossing,
        )


def _next_name(user: str, taken: set[str]) -> str:
    """Slurm's default name: the creator's and a number (``root_1``), the first free."""
    n = 1
    while f"{user}_{n}" in taken:
        n += 1
    return f"{user}_{n}"
