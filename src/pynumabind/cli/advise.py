"""``pynumabind advise [--quick] [--json] [--plot FILE] [--save [PATH]]``: command and rendering.

The measuring is :func:`pynumabind.advise`; this module parses the options,
prints progress on stderr, renders an :class:`~pynumabind.Advice` as tables
(:func:`render_text`) or JSON, and draws the optional heatmap
(:func:`write_plot`, needs matplotlib: ``pip install 'pynumabind[plot]'``).
A missing matplotlib is found before anything is measured, and so is a
``--save`` path that would overwrite a file that is not an advice record.
``--save`` writes the record mode ``advised`` follows
(:mod:`pynumabind.advisor.record`: where, and how).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Dict, List, Optional, Sequence

from ..advisor.rule import Advice, GpuCopies, MemoryMatrix, Spread
from ..errors import PynumabindError

__all__ = ["add_parser", "cmd_advise", "render_text", "write_plot"]

PLOT_HINT = "pip install 'pynumabind[plot]' (matplotlib)"


def add_parser(commands: Any) -> None:
    """Add the ``advise`` subcommand to the CLI's subparsers."""
    advise = commands.add_parser(
        "advise",
        help="measure memory and host<->GPU copy bandwidth per NUMA node, then recommend",
    )
    advise.add_argument(
        "--quick", action="store_true", help="fewer, smaller measurements (~15 s on two nodes)"
    )
    advise.add_argument("--json", action="store_true", help="print JSON instead of tables")
    advise.add_argument("--plot", metavar="FILE", help="also write a heatmap PNG (matplotlib)")
    advise.add_argument(
        "--save",
        nargs="?",
        const="",
        metavar="PATH",
        help="also save the result as this machine's advice record, which mode 'advised' "
        "follows (default PATH: $PYNUMABIND_ADVICE, else /var/lib/pynumabind/advice.json as "
        "root, ~/.cache/pynumabind/advice.json otherwise)",
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
    """Where ``--save`` writes (None: not saving), checked before anything is measured.

    A path that holds something other than an advice record is refused now,
    not after a minute of measuring; the path rule's default when no PATH.
    """
    if save is None:
        return None
    import os

    from ..advisor import record as _record

    target = os.path.abspath(save if save else _record.save_path(os.environ))
    _record.refuse_foreign(target)
    return target


def _progress(line: str) -> None:
    if sys.stderr is not None:
        sys.stderr.write(f"pynumabind advise: {line}\n")
        sys.stderr.flush()


def cmd_advise(args: argparse.Namespace) -> int:
    """Measure, then print the report (exit 0), or raise a PynumabindError (exit 1)."""
    from ..advisor import advise

    if args.plot:
        _matplotlib()  # fail before a minute of measuring, not after
    target = _save_target(args.save)
    advice = advise(
        quick=args.quick,
        copies=not args.no_copies,
        latency=not args.no_latency,
        progress=_progress,
    )
    if args.plot:
        write_plot(advice.to_dict(), args.plot)
        _progress(f"wrote {args.plot}")
    if target is not None:
        written = advice.save(target)
        _progress(
            f"saved the advice record to {written}; PYNUMABIND_MODE=advised (or --mode advised) "
            "makes binds on this machine follow it"
        )
    if sys.stdout is None:
        raise PynumabindError("standard output is closed")
    if args.json:
        sys.stdout.write(json.dumps(advice.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(advice) + "\n")
    return 0


# ---------------------------------------------------------------- tables


def _cell(spread: Optional[Spread], error: Optional[str] = None) -> str:
    if spread is None:
        return "error" if error else "-"
    return spread.text()


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    from .tables import table

    return table(headers, rows)


def _memory_lines(memory: MemoryMatrix) -> List[str]:
    heads = ["CPU node \\ memory", *(f"node {m}" for m in memory.memory_nodes)]
    bandwidth, latency, where = [], [], []
    errors: List[str] = []
    for cpu, row in zip(memory.cpu_nodes, memory.cells):
        bandwidth.append([f"node {cpu}", *(_cell(c.bandwidth, c.error) for c in row)])
        latency.append([f"node {cpu}", *(_cell(c.latency, c.error) for c in row)])
        where.append([f"node {cpu}", *(c.placement.text() if c.placement else "-" for c in row)])
        errors += [
            f"CPU node {cpu} x memory node {m}: {c.error}"
            for m, c in zip(memory.memory_nodes, row)
            if c.error
        ]
    threads = sorted({c.threads for row in memory.cells for c in row})
    lines = [
        f"Memory bandwidth, GB/s: median (quartiles) of {_repeats(memory)} repeats, "
        f"{'/'.join(map(str, threads))} threads per CPU node",
        _table(heads, bandwidth),
        "",
    ]
    if memory.latency_overhead is not None:
        lines += [
            "Memory latency, ns per dependent load (the chase loop's own "
            f"{memory.latency_overhead.median:.0f} ns subtracted; '-': within its jitter)",
            _table(heads, latency),
            "",
        ]
    lines += ["Where each buffer landed (move_pages on sampled pages)", _table(heads, where)]
    lines += [f"  {e}" for e in errors]
    lines += [f"Method: {memory.method}", *(f"Note: {n}" for n in memory.notes)]
    return lines


def _repeats(memory: MemoryMatrix) -> int:
    counts = [c.bandwidth.n for row in memory.cells for c in row if c.bandwidth is not None]
    return max(counts, default=0)


def _gpu_lines(gpus: Sequence[GpuCopies]) -> List[str]:
    rows = []
    for gpu in gpus:
        for cell in gpu.cells:
            rows.append(
                [
                    f"GPU {gpu.index}" + (f" ({gpu.name})" if gpu.name else ""),
                    "-" if gpu.numa_node is None else str(gpu.numa_node),
                    f"node {cell.cpu_node}",
                    _cell(cell.h2d, cell.error),
                    _cell(cell.d2h, cell.error),
                    cell.placement.text() if cell.placement else (cell.error or "-"),
                ]
            )
    return [
        "Pinned host<->GPU copies, GB/s: median (quartiles)",
        _table(["GPU", "its node", "buffer+thread", "H2D", "D2H", "pinned buffer"], rows),
    ]


def _firmware_lines(advice: Advice) -> List[str]:
    firmware = advice.firmware
    if firmware is None:
        return []
    rows = [
        [f"node {a}", *("-" if d is None else str(d) for d in row)]
        for a, row in zip(firmware.nodes, firmware.distances)
    ]
    lines = [
        "Firmware: SLIT distances",
        _table(["", *(f"node {n}" for n in firmware.nodes)], rows),
    ]
    if firmware.hmat:
        hmat = [
            [
                f"node {h.target}",
                f"access{h.access}",
                ",".join(map(str, h.initiators)) or "-",
                *(
                    "-" if v is None else str(v)
                    for v in (
                        h.read_bandwidth_mbs,
                        h.write_bandwidth_mbs,
                        h.read_latency_ns,
                        h.write_latency_ns,
                    )
                ),
            ]
            for h in firmware.hmat
        ]
        heads = ["memory", "class", "initiators", "read MB/s", "write MB/s", "read ns", "write ns"]
        lines += ["", "Firmware: HMAT", _table(heads, hmat)]
    elif firmware.hmat_note:
        lines.append(f"HMAT: {firmware.hmat_note}")
    return lines


def render_text(advice: Advice) -> str:
    """The report a person reads: measurements, firmware, then the recommendation."""
    lines: List[str] = []
    if advice.memory is not None:
        lines += [*_memory_lines(advice.memory), ""]
    if advice.copies:
        lines += [*_gpu_lines(advice.copies), ""]
    elif advice.copies_status == "not measured (copies=False)":
        lines += ["GPU copies: not measured (--no-copies)", ""]
    else:
        lines += [f"GPU copies: none measured: {advice.copies_status}", ""]
    lines += [*_firmware_lines(advice), ""]
    lines += [f"Note: {n}" for n in advice.notes]
    rec = advice.recommendation
    lines += [
        f"Recommendation: {rec.verdict}",
        f"  bind: {'yes' if rec.bind else 'no'}   CPU mode: {rec.mode}   "
        f"memory policy: {rec.policy}",
    ]
    for gpu in rec.per_gpu:
        where = f"node {gpu.node}" if gpu.node is not None else "no binding"
        lines.append(f"  GPU {gpu.gpu}: {where} (mode {gpu.mode}, policy {gpu.policy})")
    lines += ["Reasons:", *(f"  - {r}" for r in rec.reasons)]
    lines.append(f"({advice.seconds:.0f} s{', quick' if advice.quick else ''})")
    return "\n".join(lines)


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


def write_plot(document: Dict[str, Any], path: str) -> None:
    """Heatmaps of an advise JSON document (``Advice.to_dict()``): memory, then each GPU; PNG.

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
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise PynumabindError(f"cannot write {path!r}: {exc.strerror or exc}") from exc
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
