"""How stale an answer may be, where the client let a standby answer (``Client.allow_stale``;
the controller's server/ha/stale.py): a standby serves the jobs, a job and the nodes from the
store, as the leader last committed them, and says how long ago it saw the leader. Light: no
typing at run time (the CLI's fast path imports it)."""

from __future__ import annotations

ALLOW_HEADER = "X-Gpufleet-Allow-Stale"


class Staleness:
    """``role``: who answered ("leader", "standby"; "" a controller not in high availability);
    ``last_contact_ms``: how long before the answer the standby last saw the leader renew its
    lease (0 from the leader; None unknown); ``known_leader``: whether one held it then."""

    __slots__ = ("known_leader", "last_contact_ms", "role")

    def __init__(self, role: str, last_contact_ms: int | None, known_leader: bool) -> None:
        self.role = role
        self.last_contact_ms = last_contact_ms
        self.known_leader = known_leader

    @classmethod
    def of(cls, headers: dict[str, str]) -> Staleness:
        raw = headers.get("x-gpufleet-last-contact")
        ms = int(raw) if raw is not None and raw.isdigit() else None
        known = headers.get("x-gpufleet-known-leader", "true") == "true"
        return cls(headers.get("x-gpufleet-role", ""), ms, known)

    def __repr__(self) -> str:
        return (
            f"Staleness(role={self.role!r}, last_contact_ms={self.last_contact_ms!r}, "
            f"known_leader={self.known_leader!r})"
        )
