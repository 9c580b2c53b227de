"""No backfill: strict order. When the first job in order cannot start, nothing behind it does
(jobs held by their own queue's quota excepted)."""

NAME = "backfill/none"


class Plugin:
    reserves = False
    backfills = False
