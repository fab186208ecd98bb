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
    fig.tight_layout()
    try:
        write_with(path, option, lambda temporary: fig.savefig(temporary, dpi=120, format=_format(path)))
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


def plot_compare_gaps(report: Any, path: str, *, option: str = "--plot") -> None:
    """Gap to the best proven bound per solver and instance, as grouped bars (percent).

    Cells without a finite gap are marked above the axis: ``x`` no answer (error, unknown, infeasible),
    ``s`` skipped, ``n/a`` no positive bound on the instance. A proven optimum is a zero-height bar with a
    star.

    Raises:
        ConfigError: matplotlib missing, an unknown image extension, or the file cannot be written.
    """
    plt = _pyplot(option)
    instances = [row.name for row in report.rows]
    solvers = list(report.solvers)
    width = 0.8 / max(len(solvers), 1)
    fig, ax = plt.subplots(figsize=(min(18.0, 3.0 + 0.5 * len(instances) * max(len(solvers), 1) ** 0.5), 4.8))
    colours = plt.get_cmap("tab10")
    finite = [100 * c.gap_to_bound for row in report.rows for c in row.cells.values()
              if c.solved and math.isfinite(c.gap_to_bound)]
    top = max(finite, default=1.0) or 1.0
    for k, solver in enumerate(solvers):
        xs, heights = [], []
        for i, row in enumerate(report.rows):
            cell = row.cells[solver]
            x = i + (k - (len(solvers) - 1) / 2) * width
            if cell.solved and math.isfinite(cell.gap_to_bound):
                xs.append(x)
                heights.append(100 * cell.gap_to_bound)
                if cell.status == "optimal":
                    ax.text(x, 100 * cell.gap_to_bound + 0.02 * top, "*", ha="center", fontsize=9)
            else:
                mark = ("s" if cell.status == "skipped" else "n/a" if cell.solved else "x")
                ax.text(x, 0.02 * top, mark, ha="center", va="bottom", fontsize=7, color=colours(k % 10))
        ax.bar(xs, heights, width=width, color=colours(k % 10), label=solver)
    ax.set_xticks(range(len(instances)))
    tilted = len(instances) > 4
    ax.set_xticklabels(instances, rotation=30 if tilted else 0, ha="right" if tilted else "center", fontsize=8)
    ax.set_ylabel("gap to best bound (%)")
    ax.set_ylim(0, top * 1.15)
    ax.set_title(f"{report.suite} ({report.problem}): (objective - best bound) / objective; "
                 "* proven optimal, x no answer, s skipped")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(fig, plt, path, option)
