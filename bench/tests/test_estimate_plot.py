"""bench/estimate_plot.py: one figure with each order's JCT CDF and its estimates' error CDFs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.estimate_accuracy import Measured
from bench.estimate_plot import plot


def measured(label: str, jct_h: list[float], err_h: list[float]) -> Measured:
    errs = [e * 3600 for e in err_h]
    return Measured(label, len(jct_h), len(errs), len(errs), 0, {"planned": errs}, errs,
                    0, 0, 0, 1.0, 1.0, "d", [j * 3600 for j in jct_h])  # fmt: skip


def test_the_figure_has_a_jct_cdf_and_the_error_cdfs_of_each_order(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    out = tmp_path / "e.png"
    runs = [measured("fifo", [1.0, 5.0, 30.0], [0.1, 2.0]), measured("las", [0.5, 2.0], [0.3])]
    plot(runs, out, "t")
    assert out.stat().st_size > 1000
    fig = plt.gcf()
    jct, cdf, signed = fig.axes
    assert jct.get_title() == "JCT CDF (every job)"
    assert [line.get_label() for line in jct.get_lines()] == ["fifo", "las"]
    assert len(cdf.get_lines()) == 2 + 1  # each order's, and the 0.5 h mark
    assert signed.get_title() == "signed error CDF"
    plt.close(fig)
