"""CSV rows with the file, line and column in every error: the cells every trace loader reads."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from gpufleet.model.errors import SpecError


class Row:
    """One CSV row and where it came from; the readers raise SpecError naming the column."""

    def __init__(
        self,
        source: str,
        line: int,
        cells: dict[str, str],
        names: Mapping[str, str] | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.cells = cells
        self.names = names or {}  # a column's name as the file writes it, by its key

    def error(self, column: str, message: str) -> SpecError:
        name = self.names.get(column, column)
        return SpecError(message, source=self.source, field=f"line {self.line}: {name}")

    def text(self, column: str, *, required: bool = True) -> str:
        v = self.cells.get(column, "")
        if not v and required:
            raise self.error(column, "is empty; a value is required")
        return v

    def number(self, column: str, *, minimum: float = 0.0) -> float:
        raw = self.text(column)
        try:
            v = float(raw)
        except ValueError:
            raise self.error(column, f"must be a number, got {raw!r}") from None
        if not math.isfinite(v):
            raise self.error(column, f"must be a finite number, got {raw!r}")
        if v < minimum:
            raise self.error(column, f"must be at least {minimum:g}, got {raw}")
        return v

    def integer(self, column: str, *, minimum: int = 0, maximum: int | None = None) -> int:
        raw = self.text(column)
        try:
            v = int(raw)
        except ValueError:
            try:
                f = float(raw)
            except ValueError:
                f = math.nan
            if not f.is_integer():
                raise self.error(column, f"must be an integer, got {raw!r}") from None
            v = int(f)  # "8.0" is 8
        if v < minimum:
            raise self.error(column, f"must be at least {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise self.error(column, f"must be at most {maximum}, got {v}")
        return v


def open_text(path: Path) -> Any:
    try:
        return path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read the file: {exc.strerror or exc}", source=str(path)) from None


def csv_rows(
    path: Path,
    required: Sequence[str],
    optional: Sequence[str] = (),
    *,
    other_columns: bool = False,
    delimiter: str = ",",
    fold_case: bool = False,
    default_header: Sequence[str] | None = None,
) -> Iterator[Row]:
    """The data rows of a CSV file, after checking its header (``other_columns``: columns
    beyond ``required`` and ``optional`` are let through, for the caller to judge;
    ``fold_case``: header names are compared in lower case, as the cells are then keyed;
    ``default_header``: a file whose first row is not this header has none, and is read
    with it, its first row being data)."""
    source = str(path)
    with open_text(path) as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            first = next(reader)
        except StopIteration:
            raise SpecError("the file is empty (no header row)", source=source) from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise SpecError(f"not a CSV file: {exc}", source=source, field="line 1") from None
        header = [h.strip().lower() if fold_case else h.strip() for h in first]
        names = {h.strip().lower(): h.strip() for h in first} if fold_case else None
        pending: list[list[str]] = []
        if default_header is not None and header[: len(default_header)] != list(default_header):
            header, pending = list(default_header), [first]
        missing = [c for c in required if c not in header]
        if missing:
            raise SpecError(
                f"missing column(s) {', '.join(missing)}; the header is {', '.join(header)}",
                source=source,
                field="line 1",
            )
        known = set(required) | set(optional)
        unknown = [h for h in header if h not in known]
        if unknown and not other_columns:
            raise SpecError(
                f"unknown column(s) {', '.join(unknown)} (expected {', '.join(required)}"
                + (f"; optional {', '.join(optional)})" if optional else ")"),
                source=source,
                field="line 1",
            )
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise SpecError(
                f"duplicate column(s) {', '.join(dupes)}", source=source, field="line 1"
            )
        try:
            for values in _chain(pending, reader):
                if not values or all(not v.strip() for v in values):
                    continue
                if len(values) != len(header):
                    raise SpecError(
                        f"expected {len(header)} fields, got {len(values)}",
                        source=source,
                        field=f"line {reader.line_num}",
                    )
                cells = {h: v.strip() for h, v in zip(header, values, strict=True)}
                yield Row(source, reader.line_num, cells, names)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise SpecError(
                f"unreadable CSV: {exc}", source=source, field=f"line {reader.line_num + 1}"
            ) from None


def _chain(first: list[list[str]], rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield from first
    yield from rest


def date_cell(row: Row, column: str) -> float | None:
    """A date-time cell; None for Slurm's Unknown, None and an empty cell."""
    raw = row.cells.get(column, "")
    if raw in ("", "Unknown", "None", "NaT", "nan"):
        return None
    try:
        return datetime.fromisoformat(raw).timestamp()
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        raise row.error(
            column, f"must be a date-time such as 2025-03-01T14:05:00, got {raw!r}"
        ) from None
