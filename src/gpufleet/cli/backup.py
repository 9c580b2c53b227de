"""``gpufleet backup create|restore``: the store, backed up while the controller runs and
restored into an empty store (docs/adr/0033-backups-go-straight-to-the-store.md).

Both find the store as the controller does: ``--db URL`` (no password), ``--db-file FILE``,
``$GPUFLEET_DB``, else SQLite in ``--data-dir``. They talk to the database, not to the
controller's API: a backup works whether or not the controller answers, and a restore needs
no controller at all (it must not run on the store being restored)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Literal

import typer

from gpufleet.cli import output as out

app = typer.Typer(
    no_args_is_help=True,
    help="Back the store up while the controller runs; restore a backup into an empty store.",
)

FileArg = Annotated[Path, typer.Argument(help="The backup file.")]
DataDirOpt = Annotated[
    Path,
    typer.Option(help="the controller's --data-dir: its SQLite store (without --db)"),
]
DbOpt = Annotated[
    str,
    typer.Option(
        help="database URL without a password (as the controller's --db); default SQLite in "
        "the data dir"
    ),
]
DbFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--db-file",
        help="file (mode 0600) holding a database URL with its password; or env GPUFLEET_DB",
    ),
]
FormatOpt = Annotated[
    str,
    typer.Option(
        "--format", help="PostgreSQL: pg_dump's custom (default) or plain (SQL text) format"
    ),
]
SkipOpt = Annotated[
    int,
    typer.Option(
        "--skip-job-ids",
        min=0,
        help="new job ids continue this far past the backup's last (the lost store may have "
        "given out the next ones after the backup)",
    ),
]
DEFAULT_DATA_DIR = Path("./gpufleet-data")


def _url(data_dir: Path, db: str, db_file: Path | None) -> str:
    from gpufleet.server.store.engine import resolve_db_url, sqlite_url

    try:
        return resolve_db_url(db, db_file, os.environ) or sqlite_url(data_dir)
    except ValueError as e:
        out.fail(str(e), code=2)


def _size(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} bytes"


def _jobs(n: int) -> str:
    return "" if n < 0 else f", {n:,} jobs"


@app.command("create")
def create(
    file: FileArg,
    data_dir: DataDirOpt = DEFAULT_DATA_DIR,
    db: DbOpt = "",
    db_file: DbFileOpt = None,
    fmt: FormatOpt = "custom",
) -> None:
    """Back the store up into FILE (new, mode 0600) while the controller runs."""
    from gpufleet.server.store.backup import BackupError
    from gpufleet.server.store.backup import create as make

    if fmt not in ("custom", "plain"):
        out.fail(f"--format {fmt}: expected custom or plain", code=2)
    form: Literal["custom", "plain"] = "plain" if fmt == "plain" else "custom"
    url = _url(data_dir, db, db_file)
    began = time.monotonic()
    try:
        info = make(url, file, form)
    except BackupError as e:
        out.fail(str(e))
    took = time.monotonic() - began
    print(
        f"backup {info.file}: {_size(info.size)}{_jobs(info.jobs)}, schema revision "
        f"{info.revision} ({took:.1f} s)"
    )
    out.note(
        "job secrets are in it sealed: keep the controller's secrets key (secrets.key in its "
        "data dir, or --secrets-key-file) apart from it, and safe"
    )


@app.command("restore")
def restore(
    file: FileArg,
    data_dir: DataDirOpt = DEFAULT_DATA_DIR,
    db: DbOpt = "",
    db_file: DbFileOpt = None,
    skip_job_ids: SkipOpt = 100_000,
) -> None:
    """Restore FILE into an empty store; then start the controller on it, with its key."""
    from gpufleet.server.store.backup import BackupError, next_job_id
    from gpufleet.server.store.backup import restore as put_back

    url = _url(data_dir, db, db_file)
    began = time.monotonic()
    try:
        info = put_back(url, file, skip_job_ids)
    except BackupError as e:
        out.fail(str(e))
    took = time.monotonic() - began
    print(
        f"restored {info.file}{_jobs(info.jobs)}, schema revision {info.revision} "
        f"({took:.1f} s); new jobs are numbered from {next_job_id(url)}"
    )
    out.note(
        "start the controller on this store with the secrets key of the one backed up; "
        "its agents register again and their running jobs are adopted"
    )
