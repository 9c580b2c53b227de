"""High availability: controllers on one PostgreSQL store, one leading (ADR 0032).

- ``lease.py``: when this process leads, may take the lease, must stop (pure, on a Clock);
- ``elector.py``: the loop that reads, takes and renews the lease row (``store/leader.py``);
- ``gate.py``: what a controller that does not lead answers (where the leader is).
"""
