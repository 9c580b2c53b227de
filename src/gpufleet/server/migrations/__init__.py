"""Alembic migrations of the store; ``gpufleet.server.store.engine.upgrade`` runs them."""
