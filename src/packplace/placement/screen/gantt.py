"""Gantt chart of a scored plan: one row per GPU block, one bar per vertex over time.

matplotlib is an optional extra (``pip install 'packplace[plot]'``) imported only when drawing.
"""

from __future__ import annotations

import os
from typing import Any

from packplace import outputs
from packplace.errors import ConfigError
from packplace.placement.problem.plan import Plan, gpu_ranges


def gantt_rows(instance, plan: Plan, score) -> list[dict[str, Any]]:
    """The trace as rows ``{block, vertex, start, end}`` (seconds), blocks labelled like the CLI table
    (``r0/n0-3/g0-7``: rack, node and GPU ranges, :func:`packplace.placement.problem.plan.gpu_ranges`)."""
    rows = []
    for name, vp in plan.vertices:
        block = gpu_ranges(vp.allocation.gpu_ids(instance.cluster))
        rows.append({"block": block, "vertex": name, "start": score.start[name], "end": score.end[name]})
    return rows


def _import_pyplot():
    try:
        import matplotlib  # optional dependency (the plot extra)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # optional dependency (the plot extra)
    except ImportError:
        raise ConfigError("--gantt: matplotlib is not installed; run: pip install 'packplace[plot]'") from None
    return plt


def supported_formats() -> dict[str, str]:
    """``{extension: description}`` of the image formats the (Agg) backend writes.

    Raises:
        ConfigError: matplotlib is not installed (with the install command).
    """
    _import_pyplot()
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency (the plot extra)

    return FigureCanvasAgg.get_supported_filetypes()


def gantt_title(score) -> str:
    """Chart title: ``step time X s`` for a synchronous plan; for an asynchronous one (some staleness ≥ 1)
    ``period X s (staleness actor=1, …); synchronous step Y s`` — the drawn bars are the schedule of
    one step of the same blocks, which can span longer than the steady-state period."""
    if score.asynchronous:
        stale = ", ".join(f"{m}={t}" for m, t in sorted(score.staleness.items()))
        return (f"period {score.period:.3f} s (staleness {stale}); "
                f"synchronous step {score.synchronous_step_time:.3f} s")
    return f"step time {score.step_time:.3f} s"


def check_format(path: str, supported: dict[str, str] | None = None) -> None:
    """Raise :class:`ConfigError` unless ``path``'s extension is one of ``supported`` (matplotlib's
    ``{extension: description}``; default :func:`supported_formats`, so matplotlib must be installed);
    a path without an extension is written as PNG. Cheap: the CLI calls it before loading or solving."""
    if supported is None:
        supported = supported_formats()
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext and ext not in supported:
        raise ConfigError(f"--gantt: unknown image format {ext!r} of {path!r}; "
                          f"supported: {', '.join(sorted(supported))}")


def draw_gantt(instance, plan: Plan, score, path: str) -> None:
    """Write a PNG/SVG/PDF (by extension) of the schedule to ``path``.

    Raises:
        ConfigError: matplotlib missing (with the install command), an extension matplotlib cannot
            write (the message lists the supported ones), or the file cannot be written.
    """
    plt = _import_pyplot()
    rows = gantt_rows(instance, plan, score)
    blocks = sorted({r["block"] for r in rows})
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.6 * len(blocks)))
    try:
        check_format(path, fig.canvas.get_supported_filetypes())
    except ConfigError:
        plt.close(fig)
        raise
    for k, row in enumerate(sorted(rows, key=lambda r: r["start"])):
        y = blocks.index(row["block"])
        ax.barh(y, row["end"] - row["start"], left=row["start"], color=colours(k % 10), edgecolor="black")
        if row["end"] - row["start"] >= 0.06 * max(score.step_time, 1e-12):  # label bars wide enough to read
            ax.text(row["start"] + (row["end"] - row["start"]) / 2, y, row["vertex"], ha="center", va="center",
                    fontsize=8)
    ax.set_yticks(range(len(blocks)), labels=blocks)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours(k % 10)) for k in range(len(rows))]
    ax.legend(handles, [r["vertex"] for r in sorted(rows, key=lambda r: r["start"])], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_xlabel("seconds")
    ax.set_title(gantt_title(score))
    fig.tight_layout()
    extension = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    try:
        outputs.write_with(path, "--gantt", lambda temporary: fig.savefig(temporary, format=extension))
    except OSError as exc:
        raise ConfigError(f"--gantt: cannot write {path!r}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a format matplotlib rejects after all
        raise ConfigError(f"--gantt: cannot write {path!r}: {exc}") from None
    finally:
        plt.close(fig)
