"""bench/backup.py: a store filled as the benchmark fills it, backed up and restored whole."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from bench.backup import fill, one
from gpufleet.server.store import Store


def test_a_filled_store_is_backed_up_and_restored_with_every_job(tmp_path: Path) -> None:
    src = f"sqlite:///{tmp_path / 'src' / 'gpufleet.db'}"
    dst = f"sqlite:///{tmp_path / 'dst' / 'gpufleet.db'}"
    fill(src, 1_500)  # a batch and a half
    row = one("SQLite", src, dst, tmp_path / "b.db", "custom")
    assert row["store"] == "SQLite" and row["file_mb"] > 0
    with Store.open(dst) as s, s.engine.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one() == 1_500
