"""Measurement matrices built from figures, for the advise rule and the advice record's tests.

Values only: a :class:`~pynumabind.advisor.MemoryMatrix` or a GPU's
copies from medians, each median spread over a narrow noise band.
"""

from __future__ import annotations

from typing import Optional, Sequence

from pynumabind.records.values import CopyCell, GpuCopies, MemoryCell, MemoryMatrix, Spread


def spread(median: float, rel: float = 0.02, n: int = 9) -> Spread:
    """``n`` samples spaced evenly over median * (1 +- rel)."""
    if n == 1:
        return Spread.of([median])
    step = 2 * rel / (n - 1)
    return Spread.of([median * (1 - rel + i * step) for i in range(n)])


def matrix(grid: Sequence[Sequence[Optional[float]]], rel: float = 0.02) -> MemoryMatrix:
    """CPU nodes 0..n-1 x memory nodes 0..m-1 with these median bandwidths (None: failed)."""
    cells = tuple(
        tuple(
            MemoryCell(error="failed") if v is None else MemoryCell(spread(v, rel), threads=8)
            for v in row
        )
        for row in grid
    )
    return MemoryMatrix(tuple(range(len(grid))), tuple(range(len(grid[0]))), cells)


def gpu(
    index: int, node: Optional[int], h2d: Sequence[float], d2h: Sequence[float], rel: float = 0.02
) -> GpuCopies:
    """GPU ``index`` reported on ``node``, with these median copy rates from CPU nodes 0, 1, ..."""
    cells = tuple(
        CopyCell(cpu_node=i, h2d=spread(a, rel), d2h=spread(b, rel))
        for i, (a, b) in enumerate(zip(h2d, d2h))
    )
    return GpuCopies(index, "test GPU", None, node, cells)
