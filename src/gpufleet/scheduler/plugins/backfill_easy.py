"""EASY backfill: the first job that cannot start gets a reservation at its earliest start
(from running jobs' time limits); later jobs start only if they end before it, by their own
time limit, or keep off the devices it reserved. Large gangs therefore never starve."""

NAME = "backfill/easy"


class Plugin:
    reserves = True
    backfills = True
