"""The CLI's own text layout: each rank's lines, those all ranks share written once.

Kept apart from the CLI's control flow so the format can be tested alone.
The package's shared text helpers (the table format, sizes, counts) are
:mod:`pynumabind._text`'s.
"""

from __future__ import annotations

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import List, Sequence, Tuple

__all__ = ["by_rank"]


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
