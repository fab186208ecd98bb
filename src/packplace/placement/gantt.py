"""Gantt chart of a scored plan: one row per GPU block, one bar per vertex over time.

matplotlib is an optional extra (``pip install 'packplace[plot]'``) imported only when drawing.
"""

from __future__ import annotations

import os
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.plan import Plan


def gantt_rows(instance, plan: Plan, score) -> list[dict[str, Any]]:
    """The trace as rows ``{block, vertex, start, end}`` (seconds), blocks labelled like the CLI table
    (``r0/n0-3/g0-7``: rack, node and GPU ranges, :func:`packplace.placement.cli.gpu_ranges`)."""
    from packplace.placement.cli import gpu_ranges

    rows = []
    for name, vp in plan.vertices:
        block = gpu_ranges(vp.allocation.gpu_ids(instance.cluster))
        rows.append({"block": block, "vertex": name, "start": score.start[name], "end": score.end[name]})
    return rows


def check_format(path: str, supported: dict[str, str]) -> None:
    """Raise :class:`ConfigError` unless ``path``'s extension is one of ``supported`` (matplotlib's
    ``{extension: description}``); a path without an extension is written as PNG."""
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
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--gantt: matplotlib is not installed; run: pip install 'packplace[plot]'") from None
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
    ax.set_title(f"step time {score.step_time:.3f} s")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise ConfigError(f"--gantt: cannot write {path!r}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a format matplotlib rejects after all
        raise ConfigError(f"--gantt: cannot write {path!r}: {exc}") from None
    finally:
        plt.close(fig)
