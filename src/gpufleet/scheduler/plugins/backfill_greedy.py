"""Greedy (first-fit) backfill without reservation: any later job that fits starts. Good
utilisation, but a large gang can starve behind a stream of small jobs; kept as a reference."""

NAME = "backfill/greedy"


class Plugin:
    reserves = False
    backfills = True
