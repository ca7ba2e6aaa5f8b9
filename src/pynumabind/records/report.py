"""The text report of an :class:`~pynumabind.Advice`: ``str(advice)`` and ``pynumabind advise``.

Pure, as the values it renders are (:mod:`pynumabind.records.values`): an
Advice in, text out, no I/O, so a program that calls
:func:`pynumabind.advise` prints what the command prints (``print(advice)``,
or :func:`render_text`).  It sits beside the values, not with the advisor,
because ``str(advice)`` must not import a floor above the advice.  The
order: the memory matrix (bandwidth, latency, where each buffer landed,
weighted interleave where it was measured, the method), the GPU copies (or
why there are none), the firmware's claims, notes (HMAT's disagreements with
the measurement among them), then the recommendation and its reasons.  A reason that only repeats
the verdict is not printed twice.

Its tables are the package's one aligned-table format
(:func:`pynumabind._text.table`), the CLI's too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from .._text import table

if TYPE_CHECKING:  # for annotations only: Advice imports this module (str(advice)), and saves
    from .advice import Advice
    from .values import GpuCopies, InterleaveCell, MemoryMatrix, Spread

__all__: list[str] = []  # nothing here is public API: the names are the package's own

Rows = List[List[str]]


def _cell(spread: Optional[Spread], error: Optional[str] = None, skipped: bool = False) -> str:
    if spread is None:
        return "skipped" if skipped else "error" if error else "-"
    return spread.text()


def _memory_rows(memory: MemoryMatrix) -> Tuple[Rows, Rows, Rows]:
    """Each CPU node's row of the three tables: bandwidth, latency, where its buffers landed."""
    bandwidth, latency, where = [], [], []
    for cpu, row in zip(memory.cpu_nodes, memory.cells):
        bandwidth.append(
            [f"node {cpu}", *(_cell(c.bandwidth, c.error, bool(c.skipped)) for c in row)]
        )
        latency.append([f"node {cpu}", *(_cell(c.latency, c.error, bool(c.skipped)) for c in row)])
        where.append([f"node {cpu}", *(c.placement.text() if c.placement else "-" for c in row)])
    return bandwidth, latency, where


def _memory_errors(memory: MemoryMatrix) -> List[str]:
    """Row by row, each failed cell's error, then each reason a cell was skipped (once)."""
    errors: List[str] = []
    for cpu, row in zip(memory.cpu_nodes, memory.cells):
        errors += [
            f"CPU node {cpu} x memory node {m}: {c.error}"
            for m, c in zip(memory.memory_nodes, row)
            if c.error
        ]
        errors += [c.skipped for c in row if c.skipped and c.skipped not in errors]
    return errors


def _memory_lines(memory: MemoryMatrix) -> List[str]:
    heads = ["CPU node \\ memory", *(f"node {m}" for m in memory.memory_nodes)]
    bandwidth, latency, where = _memory_rows(memory)
    errors = _memory_errors(memory)
    threads = sorted({c.threads for row in memory.cells for c in row})
    lines = [
        f"Memory bandwidth, GB/s: median (quartiles) of {_repeats(memory)} repeats, "
        f"{'/'.join(map(str, threads))} threads per CPU node",
        table(heads, bandwidth),
        "",
    ]
    if memory.latency_overhead is not None:
        lines += [
            "Memory latency, ns per dependent load (the chase loop's own "
            f"{memory.latency_overhead.median:.0f} ns subtracted; '-': within its jitter)",
            table(heads, latency),
            "",
        ]
    lines += ["Where each buffer landed (move_pages on sampled pages)", table(heads, where)]
    lines += [f"  {e}" for e in errors]
    lines += _interleave_lines(memory)
    lines += ["", f"Method: {memory.method}", *(f"Note: {n}" for n in memory.notes)]
    return lines


def _interleave_row(memory: MemoryMatrix, cell: InterleaveCell) -> List[str]:
    weights = ",".join(f"{n}:{w}" for n, w in sorted(cell.weights.items()))
    if cell.bandwidth is not None:
        measured = cell.bandwidth.text()
    else:
        measured = "skipped" if cell.skipped else "error" if cell.error else "-"
    local = cell.local_bandwidth or memory.bandwidth(cell.cpu_node, cell.local)
    pages = cell.placement.pages if cell.placement is not None else {}
    where = ", ".join(f"{c} on node {n}" for n, c in sorted(pages.items()) if n >= 0)
    return [
        f"node {cell.cpu_node}",
        weights,
        f"{cell.predicted:.2f}x",
        measured,
        "-" if local is None else local.text(),
        where or "-",
    ]


def _interleave_lines(memory: MemoryMatrix) -> List[str]:
    """Weighted interleave beside the local node it was sampled in turn with, per CPU node."""
    if not memory.interleave:
        return []
    rows = [_interleave_row(memory, cell) for cell in memory.interleave]
    heads = ["CPU node", "weights", "predicted", "weighted GB/s", "local GB/s", "pages (sampled)"]
    lines = [
        "",
        "Weighted interleave over the CPU node's memory and the memory-only nodes "
        "(weights from the bandwidths above; measured in turn with the local node)",
        table(heads, rows),
    ]
    for cell in memory.interleave:
        why = cell.error or cell.skipped
        if why:
            lines.append(f"  CPU node {cell.cpu_node}: {why}")
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
        table(["GPU", "its node", "buffer+thread", "H2D", "D2H", "pinned buffer"], rows),
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
        table(["", *(f"node {n}" for n in firmware.nodes)], rows),
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
        lines += ["", "Firmware: HMAT", table(heads, hmat)]
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
        f"memory policy: {rec.policy}"
        + (
            ""
            if rec.weights is None
            else "   weights: " + ",".join(f"{n}:{w}" for n, w in sorted(rec.weights.items()))
        ),
    ]
    for gpu in rec.per_gpu:
        where = f"node {gpu.node}" if gpu.node is not None else "no binding"
        lines.append(f"  GPU {gpu.gpu}: {where} (mode {gpu.mode}, policy {gpu.policy})")
    reasons = [r for r in rec.reasons if r != rec.verdict]  # not the headline again
    if reasons:
        lines += ["Reasons:", *(f"  - {r}" for r in reasons)]
    lines.append(f"({advice.seconds:.0f} s{', quick' if advice.quick else ''})")
    return "\n".join(lines)
