"""The ``compare --plot`` gap chart: a symmetric-log gap axis whose linear range ends at the power of ten
below the smallest positive gap, one marker and colour per solver, the cells without a gap in their own
panel. Checked on the figure's axes settings, not on pixels."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from packplace import plots
from packplace.plots import MARKERS, gap_axis_threshold

pytest.importorskip("matplotlib", reason="pictures need the plot extra: pip install 'packplace[plot]'")


def test_the_linear_range_ends_at_the_power_of_ten_below_the_smallest_positive_gap():
    assert gap_axis_threshold([0.0, 0.003, 30.0]) == pytest.approx(1e-3)  # 10^floor(log10 0.003) = 10^-3
    assert gap_axis_threshold([0.25, 12.0]) == pytest.approx(0.1)  # 10^floor(-0.60) = 10^-1
    assert gap_axis_threshold([1e-7]) == pytest.approx(1e-4)  # clamped below at 1e-4 %
    assert gap_axis_threshold([40.0]) == 1.0  # clamped above at 1 %
    assert gap_axis_threshold([0.0]) == 1.0 and gap_axis_threshold([]) == 1.0


def report(instances: int, solvers: list[str]) -> SimpleNamespace:
    """A stand-in report: gap of solver j on instance i is 10^(j - 4) percent, the last instance has no
    answer from the first solver, cpsat is skipped on the second."""
    rows = []
    for i in range(instances):
        cells = {}
        for j, name in enumerate(solvers):
            gap = 10.0 ** (j - 4) / 100
            status = "optimal" if j == 0 else "feasible"
            solved = True
            if i == instances - 1 and j == 0:
                gap, status, solved = math.inf, "error", False
            if i == 1 and name == "cpsat":
                gap, status, solved = math.inf, "skipped", False
            cells[name] = SimpleNamespace(gap_to_bound=gap, status=status, solved=solved)
        rows.append(SimpleNamespace(name=f"instance-{i}", cells=cells))
    return SimpleNamespace(rows=rows, solvers=solvers, suite="stand-in", problem="balance")


def test_twenty_instances_by_six_solvers_on_a_symlog_axis(tmp_path, monkeypatch):
    figures = []
    save = plots._save

    def keep(fig, plt, path, option):
        figures.append((fig, [(ax.get_xscale(), ax.xaxis.get_transform()) for ax in fig.axes],
                        [[tuple(c.get_offsets().shape) for c in ax.collections] for ax in fig.axes],
                        fig.axes[1].get_legend_handles_labels()[1]))
        save(fig, plt, path, option)

    monkeypatch.setattr(plots, "_save", keep)
    solvers = ["cpsat", "karmarkar_karp", "lns", "lpt", "reference", "repair"]
    out = tmp_path / "gaps.png"
    plots.plot_compare_gaps(report(20, solvers), str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (_, scales, points, labels), = figures
    (missing_scale, _), (gap_scale, transform) = scales
    assert missing_scale == "linear" and gap_scale == "symlog"
    assert transform.linthresh == pytest.approx(1e-4)  # smallest gap 10^-4 %
    assert labels == solvers  # one legend entry (marker + colour) per solver
    assert len(set(MARKERS[: len(solvers)])) == len(solvers)
    # gap panel: per solver one collection; cpsat has 20 - 1 skipped - 1 error = 18 points, the rest 20
    assert [shape[0] for shape in points[1]] == [18, 20, 20, 20, 20, 20]
    assert sum(shape[0] for shape in points[0]) == 2  # the skipped and the error cell, in the left panel
