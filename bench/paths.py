"""Where the benchmarks find their inputs: the traces and reference figures in ``shared/``, the
sibling of a source checkout (they are not shipped with the package: pass ``--trace`` and the
like to run from an installed one)."""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]  # bench/ → the repository
SHARED = CHECKOUT.parent / "shared"
