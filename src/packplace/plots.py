"""Pictures of balance results and of comparison reports (``--plot`` of ``balance`` and ``compare``).

matplotlib is an optional extra (``pip install 'packplace[plot]'``), imported only when drawing; the
Agg backend writes PNG, SVG or PDF by the file's extension (none: PNG).
"""

from __future__ import annotations

import math
import os
from typing import Any

from packplace.balance.evaluator import BalanceEvaluator
from packplace.errors import ConfigError
from packplace.outputs import write_with


def _pyplot(option: str) -> Any:
    try:
        import matplotlib  # optional dependency (packplace[plot]), loaded only to draw

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # optional dependency, after the backend is chosen
    except ImportError:
        raise ConfigError(f"{option}: matplotlib is not installed; run: pip install 'packplace[plot]'") from None
    return plt


def _format(path: str) -> str:
    """The image format of ``path``'s extension (PNG when there is none)."""
    return os.path.splitext(path)[1].lower().lstrip(".") or "png"


def check_format(path: str, option: str = "--plot") -> None:
    """Raise :class:`ConfigError` unless matplotlib can write ``path``'s extension (cheap: the CLI calls
    it before solving).

    Raises:
        ConfigError: matplotlib missing (with the install command) or an unknown image extension (the
            message lists the supported ones).
    """
    _pyplot(option)
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency, present once _pyplot passed

    supported = FigureCanvasAgg.get_supported_filetypes()
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext and ext not in supported:
        raise ConfigError(f"{option}: unknown image format {ext!r} of {path!r}; "
                          f"supported: {', '.join(sorted(supported))}")


def _save(fig: Any, plt: Any, path: str, option: str) -> None:
    """Write the figure atomically (a temporary file in the target folder, then ``os.replace``)."""
    if fig.get_layout_engine() is None:  # a figure made with a layout engine of its own keeps it
        fig.tight_layout()
    try:
        # bbox "tight": the legend and long tick labels outside the axes are kept in the image
        write_with(path, option, lambda temporary: fig.savefig(temporary, dpi=120, format=_format(path),
                                                               bbox_inches="tight"))
    except OSError as exc:
        raise ConfigError(f"{option}: cannot write {path!r}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{option}: cannot write {path!r}: {exc}") from None
    finally:
        plt.close(fig)


def plot_rank_loads(instance: Any, assignment: Any, path: str, *, title: str = "", option: str = "--plot") -> None:
    """Per-rank loads of ``assignment`` as stacked bars (one segment per bin, in rank order), with the
    evaluator's makespan lower bound and the mean load as horizontal lines.

    Args:
        instance: The :class:`~packplace.balance.schema.BalanceInstance`.
        assignment: A feasible :class:`~packplace.balance.schema.Assignment` of it.
        path: Image file (PNG/SVG/PDF by extension).
        title: Title prefix (e.g. the instance name).

    The bound is :meth:`~packplace.balance.evaluator.BalanceEvaluator.lower_bound` of ``makespan``
    (max of the mean load, the largest sample and the two smallest of the D+1 largest samples), in the
    instance's cost units; a rank's bar reaching it is as low as any layout can make the busiest rank.

    Raises:
        ConfigError: matplotlib missing, an unknown image extension, or the file cannot be written.
    """
    plt = _pyplot(option)
    evaluator = BalanceEvaluator(instance)
    _, bin_costs = evaluator.bin_arrays(assignment.bins)
    ranks, per_rank = instance.data_parallel_size, instance.local_batch_size
    per_bin = bin_costs.reshape(ranks, per_rank)
    loads = per_bin.sum(axis=1)
    bound = evaluator.lower_bound("makespan")
    fig, ax = plt.subplots(figsize=(min(16.0, 4.0 + 0.35 * ranks), 4.5))
    colours = plt.get_cmap("tab20")
    bottom = [0.0] * ranks
    for j in range(per_rank):
        heights = per_bin[:, j].tolist()
        ax.bar(range(ranks), heights, bottom=bottom, color=colours(j % 20), edgecolor="white", linewidth=0.5,
               label=f"bin {j}" if per_rank <= 12 else None)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.axhline(bound, color="black", linestyle="--", linewidth=1.2, label=f"makespan lower bound {bound:.4g}")
    mean = float(loads.mean())
    ax.axhline(mean, color="grey", linestyle=":", linewidth=1.0, label=f"mean load {mean:.4g}")
    makespan = float(loads.max())
    gap = "n/a" if bound <= 0 else f"{100 * (makespan - bound) / makespan:.2f}%"
    ax.set_title(f"{title + ': ' if title else ''}max load {makespan:.4g}, gap to bound {gap}")
    ax.set_xlabel("data-parallel rank")
    ax.set_ylabel(f"load ({instance.cost_unit})")
    if ranks <= 64:
        ax.set_xticks(range(ranks))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(fig, plt, path, option)


#: Marker per solver column of the gap chart (with a colour of ``tab10``): shapes that stay distinct in
#: greyscale and when they overlap.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")


def gap_axis_threshold(gaps_percent: list[float]) -> float:
    """The linear range ``[-t, t]`` (percent) of the chart's symmetric-log gap axis: the largest power of
    ten at or below the smallest positive gap, within ``[1e-4, 1]`` percent (so a gap of 0.003% and one
    of 30% are both readable, and a zero gap sits at 0)."""
    positive = [g for g in gaps_percent if g > 0]
    if not positive:
        return 1.0
    return min(1.0, max(1e-4, 10.0 ** math.floor(math.log10(min(positive)))))


def plot_compare_gaps(report: Any, path: str, *, option: str = "--plot") -> None:
    """Gap to the best proven bound per instance (rows) and solver (one marker and colour each), percent
    on a symmetric-log axis.

    The axis is linear within ``[0, t]`` (:func:`gap_axis_threshold`) and logarithmic above, so a gap of
    0.01% and one of 40% are both visible, and a zero gap (a solver that reached the bound) sits at 0.
    The solvers of a row are offset vertically so that equal gaps do not hide each other; a marker with
    a black edge is a proven optimum. Cells without a finite gap are drawn in a narrow panel on the left:
    ``x`` no answer (error, unknown, infeasible), ``s`` skipped, ``n/a`` no positive bound.

    Raises:
        ConfigError: matplotlib missing, an unknown image extension, or the file cannot be written.
    """
    plt = _pyplot(option)
    rows = list(report.rows)
    solvers = list(report.solvers)
    n, k = len(rows), max(len(solvers), 1)
    gaps = [100 * c.gap_to_bound for row in rows for c in row.cells.values()
            if c.solved and math.isfinite(c.gap_to_bound)]
    threshold = gap_axis_threshold(gaps)
    fig, (missing_ax, ax) = plt.subplots(
        1, 2, sharey=True, figsize=(11.0, 1.6 + 0.32 * max(n, 4)), layout="constrained",
        gridspec_kw={"width_ratios": [1, 9]})
    colours = plt.get_cmap("tab10")
    missing_columns = {"x": 0, "s": 1, "n/a": 2}
    spread = 0.6 / k
    for j, solver in enumerate(solvers):
        colour, marker = colours(j % 10), MARKERS[j % len(MARKERS)]
        found: dict[str, list[float]] = {"x": [], "y": [], "edge": []}
        for i, row in enumerate(rows):
            cell = row.cells[solver]
            y = i + (j - (k - 1) / 2) * spread
            if cell.solved and math.isfinite(cell.gap_to_bound):
                found["x"].append(100 * cell.gap_to_bound)
                found["y"].append(y)
                found["edge"].append(cell.status == "optimal")
            else:
                mark = "s" if cell.status == "skipped" else "n/a" if cell.solved else "x"
                missing_ax.scatter([missing_columns[mark]], [y], marker=marker, s=28, color=colour,
                                   alpha=0.35 if mark == "s" else 0.9)
        edges = ["black" if proven else colour for proven in found["edge"]]
        widths = [1.3 if proven else 0.5 for proven in found["edge"]]
        ax.scatter(found["x"], found["y"], marker=marker, s=36, color=colour, edgecolors=edges, linewidths=widths,
                   alpha=0.9, label=solver, zorder=3)
    ax.set_xscale("symlog", linthresh=threshold, linscale=0.5)
    # a little room left of 0 (inside the linear range) so that the markers of zero gaps show whole
    ax.set_xlim(left=-0.25 * threshold, right=max(max(gaps, default=1.0) * 1.6, threshold * 10))
    ax.axvspan(0, threshold, color="0.93", zorder=0)
    ax.grid(axis="x", which="major", color="0.85", linewidth=0.6)
    for i in range(n + 1):
        ax.axhline(i - 0.5, color="0.9", linewidth=0.5, zorder=1)
        missing_ax.axhline(i - 0.5, color="0.9", linewidth=0.5, zorder=1)
    ax.set_xlabel(f"gap to best bound (%), (objective - best bound) / objective; log scale, linear below "
                  f"{threshold:g}% (shaded)")
    missing_ax.set_yticks(range(n))
    missing_ax.set_yticklabels([row.name for row in rows], fontsize=8)
    missing_ax.set_ylim(n - 0.5, -0.5)
    missing_ax.set_xticks(list(missing_columns.values()))
    missing_ax.set_xticklabels(list(missing_columns), fontsize=8)
    missing_ax.set_xlim(-0.6, 2.6)
    missing_ax.set_xlabel("no gap", fontsize=8)
    ax.set_title(f"{report.suite} ({report.problem}): gap per instance and solver; black edge: proven optimal; "
                 "left: x no answer, s skipped, n/a no bound", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="solver", title_fontsize=8)
    _save(fig, plt, path, option)
