"""The README's "Backups" commands, run as written (each line of its ``sh`` blocks, in a
directory laid out as the README assumes): the SQLite block against a running controller's
data directory, the PostgreSQL block against a database made for the test (its URL in
``db.url``, an empty one's in ``new-db.url``, as the README's ``--db-file`` names them)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from livehelp import wait_state

import realparts
from gpufleet.base.secretfile import write_secret
from gpufleet.model.job import JobSpec
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.server.store import NewJob, Store
from support.readme import blocks, lines, run_line, section

pytestmark = pytest.mark.e2e


def run_as_written(block: str, cwd: Path) -> list[str]:
    return [run_line(line, cwd, dict(os.environ)) for line in lines(block)]


def jobs_in(url: str) -> set[str]:
    with Store.open(url, migrate=False) as s, s.engine.connect() as c:
        return {str(r[0]) for r in c.execute(sa.text("SELECT id FROM jobs"))}


def test_the_readmes_sqlite_backup_commands_work_as_written(
    new_cluster: Any, tmp_path: Path
) -> None:
    sqlite_block, _ = blocks(section("Backups"))
    c: LocalCluster = new_cluster(agents=1)
    with c.user("ana") as u:
        (jid,) = u.submit({"name": "x", "gpus_per_worker": 1, "command": ["true"]})
        wait_state(u, jid, "SUCCEEDED", 60)
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "gpufleet-data").symlink_to(c.data_dir / "controller")  # the controller runs on
    out = run_as_written(sqlite_block, ops)
    assert out[0].startswith("backup nightly.gpufleet: ")
    assert out[1].startswith("restored nightly.gpufleet, ")
    new = ops / "new-data"
    assert jobs_in(f"sqlite:///{new / 'gpufleet.db'}") == {jid}
    for key in ("secrets.key", "step.key"):
        assert (new / key).read_bytes() == (c.data_dir / "controller" / key).read_bytes()


def test_the_readmes_postgresql_backup_commands_work_as_written(tmp_path: Path) -> None:
    realparts.require("postgres", "pg_dump", "pg_restore")
    _, pg_block = blocks(section("Backups"))
    with realparts.pg_database() as src, realparts.pg_database() as dst:
        with Store.open(src) as s:
            ids = s.add_jobs([NewJob(JobSpec(name="x", user="ana"), 1.0) for _ in range(3)])
        write_secret(tmp_path / "db.url", src)
        write_secret(tmp_path / "new-db.url", dst)
        out = run_as_written(pg_block, tmp_path)
        assert out[0].startswith("backup nightly.dump: ")
        assert out[1].startswith("backup nightly.sql: ")
        assert out[2].startswith("restored nightly.dump, ")
        assert jobs_in(dst) == set(ids)
