"""``pynumabind advise [--quick] [--json] [--plot FILE] [--save [PATH]]``: command and rendering.

The measuring is :func:`pynumabind.advise`; this module parses the options,
prints progress on stderr, prints the :class:`~pynumabind.Advice` as tables
(:func:`pynumabind.records.report.render_text`, also ``str(advice)``) or
JSON, and draws the optional heatmap
(:func:`write_plot`, needs matplotlib: ``pip install 'pynumabind[plot]'``).

``--plot FILE`` is checked before anything is measured, since measuring
takes up to a minute: a missing matplotlib is a failure (exit 1); an empty
name, a name without an extension (the extension is the format: no file is
written under another name than the one given), a format matplotlib cannot
write, and a path that cannot be written (tried by opening it for appending,
which changes nothing, and removing it again if it was new) are usage
errors (exit 2) naming the problem.  The report is printed before the plot
is drawn, so a plot that still fails (exit 1) loses no measurement.

``--save [PATH]`` writes the record mode ``advised`` follows
(:mod:`pynumabind.records.store`: where, and how; PATH, or
``PYNUMABIND_ADVICE``, may name a directory of records, one per machine
type).  A measurement is never lost to the save:

* **before measuring**, the target is checked
  (:func:`pynumabind.records.store.prepare_save`): a path that holds
  something other than an advice record, or a place that cannot be created
  or written (a read-only file system, as root too; a directory this account
  may not write) is a usage error (exit 2) naming the path, with nothing
  measured.  Missing directories are created then, mode 0755, and each is
  named on stderr; so is a place other accounts could not read (a note: a
  private place is right for one's own workers, not for a service's);
* **after measuring**, the record is saved first, then the report (or the
  ``--json`` document) is printed whatever happened to the save; if the save
  failed (the disk filled, the directory went away), the error naming the
  path follows the report on stderr and the exit status is 1.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any, Dict, List, Optional

from ..errors import ConfigError, PynumabindError

__all__ = ["add_parser", "check_plot_path", "cmd_advise", "write_plot"]

PLOT_HINT = "pip install 'pynumabind[plot]' (matplotlib)"


def add_parser(commands: Any) -> None:
    """Add the ``advise`` subcommand to the CLI's subparsers."""
    advise = commands.add_parser(
        "advise",
        help="measure memory and host<->GPU copy bandwidth per NUMA node, then recommend",
        description="Measure memory bandwidth and latency per CPU node x memory node, and "
        "pinned host<->GPU copies per GPU x node, on this machine; then say whether binding "
        "makes a measurable difference here, and how to bind (progress on stderr).",
    )
    advise.add_argument(
        "--quick", action="store_true", help="fewer, smaller measurements (~15 s on two nodes)"
    )
    advise.add_argument("--json", action="store_true", help="print JSON instead of tables")
    advise.add_argument(
        "--plot",
        metavar="FILE",
        help="also write heatmaps to FILE; its extension is the format (.png, .svg, .pdf, ...; "
        "matplotlib)",
    )
    advise.add_argument(
        "--save",
        nargs="?",
        const="",
        metavar="PATH",
        help="also save the result as this machine's advice record, which mode 'advised' "
        "follows. PATH is a record file, or a directory of records (one per machine type) when "
        "it ends with / or is an existing directory (default: $PYNUMABIND_ADVICE, else "
        "/var/lib/pynumabind/ as root, ~/.cache/pynumabind/ otherwise)",
    )
    advise.add_argument(
        "--no-copies", action="store_true", help="do not measure pinned host<->GPU copies"
    )
    advise.add_argument(
        "--no-latency", action="store_true", help="do not measure latency (pointer chase)"
    )
    advise.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (repeat for debug)"
    )


def _save_target(save: Optional[str]) -> Optional[str]:
    """The file ``--save`` writes (None: not saving), checked before anything is measured.

    See the module docstring: refused now, not after a minute of measuring;
    the directories created and a place other accounts cannot read are said
    on stderr.  The path rule's place when no PATH.
    """
    if save is None:
        return None
    from ..records.store import others_cannot_read, prepare_save

    target = prepare_save(save if save else None)
    for made in target.created:
        _progress(f"created the directory {made} (mode 0755) for the advice record")
    hidden = others_cannot_read(target)
    if hidden is not None:  # a note: a private place is right for one's own workers
        _progress(f"note: {hidden}")
    return target.file


def _progress(line: str) -> None:
    if sys.stderr is not None:
        sys.stderr.write(f"pynumabind advise: {line}\n")
        sys.stderr.flush()


def cmd_advise(args: argparse.Namespace) -> int:
    """Measure, then print the report (exit 0), or raise a PynumabindError (exit 1)."""
    import json  # here: every command loads this module for its parser, ``exec`` too

    from ..advisor import advise
    from ..records.report import render_text

    plot = args.plot
    if plot is not None:
        check_plot_path(plot)  # before a minute of measuring, not after
    target = _save_target(args.save)
    advice = advise(
        quick=args.quick,
        copies=not args.no_copies,
        latency=not args.no_latency,
        progress=_progress,
    )
    unsaved: Optional[PynumabindError] = None
    if target is not None:  # the measurement is kept before anything else can fail
        try:
            written = advice.save(target)
        except PynumabindError as exc:  # reported after the report: nothing measured is lost
            unsaved = exc
        else:
            _progress(
                f"saved the advice record to {written}; PYNUMABIND_MODE=advised (or --mode "
                "advised) makes binds on this machine follow it"
            )
    if sys.stdout is None:
        raise PynumabindError("standard output is closed")
    if args.json:
        sys.stdout.write(json.dumps(advice.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(advice) + "\n")
    sys.stdout.flush()  # the report is out even if the save failed or the plot fails
    if unsaved is not None:
        if sys.stderr is not None:
            sys.stderr.write(
                f"pynumabind: error: {unsaved} (the report above was measured but not saved)\n"
            )
    if plot is not None:
        write_plot(advice.to_dict(), plot)
        _progress(f"wrote {plot}")
    return 0 if unsaved is None else 1


def check_plot_path(path: str) -> str:
    """The format of plot file ``path``; a ConfigError naming what is wrong with it.

    Checked before measuring (see the module docstring); a missing
    matplotlib is a PynumabindError.
    """
    if not path:
        raise ConfigError("--plot: the file name is empty")
    extension = os.path.splitext(path)[1][1:].lower()
    formats = _formats()
    known = ", ".join(formats)
    if not extension:
        raise ConfigError(
            f"--plot {path!r} has no extension, which names the format: e.g. {path}.png "
            f"(matplotlib writes {known})"
        )
    if extension not in formats:
        raise ConfigError(
            f"--plot {path!r}: matplotlib cannot write .{extension} files (it writes {known})"
        )
    _check_writable(path)
    return extension


def _check_writable(path: str) -> None:
    """Open ``path`` for appending (changes nothing), and remove it again if it was new."""
    existed = os.path.lexists(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise ConfigError(f"--plot: cannot write {path!r}: {exc.strerror or exc}") from None
    os.close(fd)
    if not existed:
        try:
            os.unlink(path)
        except OSError:
            pass


# ------------------------------------------------------------------ plot


def _matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PynumabindError(
            f"--plot needs matplotlib, which is not installed: {PLOT_HINT}"
        ) from exc
    return plt


def _formats() -> List[str]:
    """The file formats matplotlib can write (their extensions)."""
    _matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def write_plot(document: Dict[str, Any], path: str) -> None:
    """Heatmaps of an advise JSON document (``Advice.to_dict()``): memory, then each GPU.

    The format is ``path``'s extension (PNG without one); the file written
    is exactly ``path``.

    It reads the JSON form, so a saved result (the benchmarks keep them) can
    be drawn again later.
    """
    plt = _matplotlib()
    memory = document.get("memory")
    gpus = document.get("copies") or []
    panels = (1 if memory else 0) + len(gpus)
    if panels == 0:
        raise PynumabindError("nothing was measured: no plot to draw")
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 4), squeeze=False)
    position = 0
    if memory:
        _heatmap(
            axes[0][0],
            memory["bandwidth_gbs"],
            [f"mem {m}" for m in memory["memory_nodes"]],
            [f"cpu {c}" for c in memory["cpu_nodes"]],
            "memory bandwidth, GB/s",
        )
        position = 1
    for gpu in gpus:
        _heatmap(
            axes[0][position],
            [gpu["h2d_gbs"], gpu["d2h_gbs"]],
            [f"node {n}" for n in gpu["cpu_nodes"]],
            ["H2D", "D2H"],
            f"GPU {gpu['index']} pinned copies, GB/s",
        )
        position += 1
    fig.suptitle(document["recommendation"]["verdict"], fontsize=8)
    fig.tight_layout()
    extension = os.path.splitext(path)[1][1:].lower() or "png"
    try:
        fig.savefig(path, dpi=110, format=extension)  # exactly ``path``, nothing appended
    except OSError as exc:
        raise PynumabindError(f"cannot write {path!r}: {exc.strerror or exc}") from exc
    except (ValueError, RuntimeError) as exc:  # e.g. no LaTeX for .pgf
        raise PynumabindError(f"cannot draw {path!r}: {exc}") from exc
    finally:
        plt.close(fig)


def _heatmap(
    ax: Any, values: List[List[Optional[float]]], columns: List[str], rows: List[str], title: str
) -> None:
    grid = [[float("nan") if v is None else float(v) for v in row] for row in values]
    image = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(columns)), labels=columns)
    ax.set_yticks(range(len(rows)), labels=rows)
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            if not math.isnan(value):
                ax.text(j, i, f"{value:.3g}", ha="center", va="center", color="w", fontsize=9)
    ax.set_title(title, fontsize=9)
    ax.figure.colorbar(image, ax=ax, fraction=0.046)
