"""Plain-text rendering helpers for the CLI: aligned tables and sizes.

Kept apart from the CLI's control flow so the formats can be tested alone.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..planner._sets import counted  # "1 NUMA node", "2 GPUs": the planner's rule
from ..records.report import table  # the one table format (the advise report's too)

__all__ = ["by_rank", "counted", "human_bytes", "table"]


def human_bytes(value: Optional[int]) -> str:
    """``123.4 GiB``; ``-`` when unknown."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def by_rank(per_rank: Sequence[Tuple[int, Sequence[str]]]) -> List[str]:
    """Each rank's lines, those every rank shares written once.

    ``per_rank`` pairs a rank with its lines (reasons, warnings).  With two
    or more ranks, a line all of them have is written once as
    ``  all ranks: ...`` (in the first rank's order); the rest as
    ``  rank N: ...``.
    """
    shared: List[str] = []
    if len(per_rank) > 1:
        rest = [set(lines) for _, lines in per_rank[1:]]
        shared = [line for line in dict.fromkeys(per_rank[0][1]) if all(line in r for r in rest)]
    out = [f"  all ranks: {line}" for line in shared]
    common = set(shared)
    for rank, lines in per_rank:
        out += [f"  rank {rank}: {line}" for line in lines if line not in common]
    return out
