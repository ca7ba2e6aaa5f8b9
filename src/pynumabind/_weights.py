"""Interleave weights as values: read, checked, compared, judged and laid out (pure).

``weighted-interleave`` (:class:`~pynumabind.model.MemoryPolicy`) spreads
pages over nodes in proportion to a weight per node: weights ``{0: 3, 2: 1}``
put three pages on node 0 for every one on node 2.  Everything about weights
that needs no machine is here, once, for every layer:

* **Reading** (:func:`parse_weights`, :func:`check_weights`): a weight is an
  integer from :data:`MIN_WEIGHT` to :data:`MAX_WEIGHT` (the kernel's own
  range), keyed by a node id (0 to :data:`~pynumabind.model.MAX_NODE_ID`).
  As text, ``"0:3,2:1"``: ``NODE:WEIGHT`` items separated by commas, ASCII
  whitespace around items and around the colon allowed, ASCII decimal digits
  only, each node once (the CLI's ``--weights``, ``PYNUMABIND_WEIGHTS``).  A
  bad string is a :class:`~pynumabind.errors.ListParseError` naming the token
  and its position, as a bad node list is; a bad mapping (the API's
  ``weights={0: 3, 2: 1}``) a :class:`~pynumabind.errors.ConfigError` naming
  the entry.  Whether the nodes exist, have memory and are allowed is the
  planner's to check against a machine
  (:func:`pynumabind.planner._request.check_memory_nodes`).
* **Comparing** (:func:`proportional`, :func:`kernel_difference`): two sets
  of weights mean the same split when they name the same nodes and are
  proportional (``{0: 6, 2: 2}`` is ``{0: 3, 2: 1}``).  The kernel's
  system-wide weights are compared with requested ones this way.
* **Judging a split** (:func:`split_problems`): the tolerance, stated once.
  A node's share of the pages counted may differ from its weight's share by
  at most :data:`TOLERANCE_POINTS` percentage points, or by one run of that
  node's pages when a run is more: pages are placed in runs (the kernel
  places ``w`` consecutive pages -- or huge pages -- on a node of weight
  ``w``; :func:`weighted_runs` lays out longer ones), and a count over a few
  cycles can cut one run short or long.  Pages on nodes without a weight are
  not judged here: they are off the policy's nodes, which the verifier and
  the census report on their own.
* **Laying out a buffer** (:func:`weighted_runs`): the runs
  :func:`~pynumabind.bind_memory` binds one node each (``MPOL_BIND``), so
  that requested weights are honoured exactly without the kernel's
  system-wide weights.  Each node gets its exact share of the range's pages
  (largest remainder: within one page of ``pages * w / W``), in cycles: in
  ascending node order, a run of ``w`` *points* per node, a point being
  ``pages_per_point`` pages.  A point is one page, or more so that the
  range has at most :data:`MAX_RUNS` runs (each ``mbind`` of a run splits
  the mapping: one ``/proc/self/maps`` entry per run, bounded by
  ``vm.max_map_count``).  Where transparent huge pages exist and the range
  holds at least :data:`MIN_HUGE_CYCLES` cycles of huge-page runs, a point
  is a whole number of huge pages and the run boundaries fall on huge-page
  boundaries (the first run is shortened to reach one), so no huge page is
  cut between two nodes; only the last runs, where each node's exact share
  is met, may end elsewhere.
* **Weights from bandwidth** (:func:`from_bandwidth`, what ``advise``
  recommends): weights proportional to each node's measured bandwidth, as
  the smallest integers that say so.  For ``top`` = 1, 2, ... 255 in turn,
  each node's weight is ``round(top * bandwidth / fastest)`` (halves
  rounded up), at least 1; the first ``top`` whose every node's share of
  the weights is within :data:`BANDWIDTH_POINTS` percentage points of its
  share of the bandwidth is taken, else ``top`` = 255 (the finest the
  kernel's range allows), and the weights are divided by their greatest
  common divisor.  Equal bandwidths give 1 each; 4:1 gives 4:1; 3.1:1 gives
  3:1 (75.0% for 75.6%).

A value module: nothing here reads or writes anything.
"""

from __future__ import annotations

import math
import operator
from typing import Dict, List, Mapping, Optional, Tuple, Union

from ._text import counted, shown
from .errors import ConfigError, ListParseError
from .model import MAX_NODE_ID

__all__ = [
    "BANDWIDTH_POINTS",
    "MAX_RUNS",
    "MAX_WEIGHT",
    "MIN_HUGE_CYCLES",
    "MIN_WEIGHT",
    "TOLERANCE_POINTS",
    "Layout",
    "Run",
    "Weights",
    "check_weights",
    "described",
    "exact_shares",
    "format_weights",
    "from_bandwidth",
    "invalid_variable",
    "kernel_difference",
    "parse_weights",
    "proportional",
    "split_problems",
    "weighted_runs",
]

#: The kernel's range for a node's weight (``weighted_interleave/nodeN``).
MIN_WEIGHT = 1
MAX_WEIGHT = 255
#: How far a node's share of the pages may be from its weight's share, in
#: percentage points (widened to one run of the node's pages where that is more).
TOLERANCE_POINTS = 5
#: The most runs :func:`weighted_runs` lays a range out in (each is a mapping of its own).
MAX_RUNS = 256
#: Cycles of huge-page runs a range must hold for its runs to be whole huge pages.
MIN_HUGE_CYCLES = 4
#: How far a node's share of weights from bandwidth may be from its share of the
#: bandwidth, in percentage points, for :func:`from_bandwidth` to stop at smaller weights.
BANDWIDTH_POINTS = 1

#: Node id -> weight, ascending by node.
Weights = Mapping[int, int]

_SPACE = " \t\n\r\f\v"  # ASCII whitespace only, as every list reader of the package


# ------------------------------------------------------------------ reading


def _fail(message: str, text: str, token: str, position: int) -> ListParseError:
    return ListParseError(message, text=text, token=token, position=position)


def _digits(text: str, token: str, at: int, what: str, limit: int) -> int:
    """An ASCII decimal from 0 to ``limit`` (``token`` sits at ``at`` in ``text``)."""
    if not token or not token.isascii() or not token.isdigit():
        raise _fail(f"invalid {what} (expected ASCII digits)", text, token, at)
    if len(token) > 6 or int(token) > limit:
        raise _fail(f"{what} out of range (at most {limit})", text, token, at)
    return int(token)


def _item(text: str, item: str, at: int) -> Tuple[int, int]:
    """One ``NODE:WEIGHT`` item (stripped) at ``at`` in ``text``."""
    node_text, colon, weight_text = item.partition(":")
    if not colon:
        raise _fail("invalid weights item (expected NODE:WEIGHT)", text, item, at)
    node_token = node_text.strip(_SPACE)
    node = _digits(text, node_token, at, "node id", MAX_NODE_ID)
    weight_at = at + len(node_text) + 1
    weight_token = weight_text.strip(_SPACE)
    weight_at += len(weight_text) - len(weight_text.lstrip(_SPACE))
    weight = _digits(text, weight_token, weight_at, "weight", 1 << 20)
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise _fail(
            f"weight out of range (from {MIN_WEIGHT} to {MAX_WEIGHT})",
            text,
            weight_token,
            weight_at,
        )
    return node, weight


def parse_weights(text: str) -> Dict[int, int]:
    """``"0:3,2:1"`` -> ``{0: 3, 2: 1}`` (see the module docstring for the grammar)."""
    if not isinstance(text, str):
        raise ConfigError(f"weights text must be a string, not {type(text).__name__}")
    out: Dict[int, int] = {}
    if not text.strip(_SPACE):
        raise _fail("no weights (expected NODE:WEIGHT items)", text, text, 0)
    position = 0
    for raw in text.split(","):
        item = raw.strip(_SPACE)
        at = position + len(raw) - len(raw.lstrip(_SPACE))
        position += len(raw) + 1
        if not item:
            raise _fail("empty weights item", text, raw, at)
        node, weight = _item(text, item, at)
        if node in out:
            raise _fail(f"node {node} is given twice", text, item, at)
        out[node] = weight
    return dict(sorted(out.items()))


def _index(value: object) -> Optional[int]:
    """An integer (an int or anything with ``__index__``, bool excluded), else None."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        return None
    return operator.index(value)


def check_weights(value: Union[str, Weights], what: str = "weights") -> Dict[int, int]:
    """``value`` (a mapping or its text) as node -> weight, ascending; a typed error if bad.

    ``what`` names the setting in errors (``weights``, ``--weights``).
    """
    if isinstance(value, str):
        return parse_weights(value)
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{what} must map node ids to weights ({{0: 3, 2: 1}}) or be text such as "
            f"'0:3,2:1', not {type(value).__name__}"
        )
    if not value:
        raise ConfigError(f"{what} names no node")
    out: Dict[int, int] = {}
    for key, weight in value.items():
        node = _index(key)
        if node is None or not 0 <= node <= MAX_NODE_ID:
            raise ConfigError(f"{what}: {key!r:.40} is not a node id (0 to {MAX_NODE_ID})")
        number = _index(weight)
        if number is None or not MIN_WEIGHT <= number <= MAX_WEIGHT:
            raise ConfigError(
                f"{what}: node {node}'s weight {weight!r:.40} is not an integer from "
                f"{MIN_WEIGHT} to {MAX_WEIGHT}"
            )
        if node in out:
            raise ConfigError(f"{what}: node {node} is given twice")
        out[node] = number
    return dict(sorted(out.items()))


def format_weights(weights: Weights) -> str:
    """``{0: 3, 2: 1}`` -> ``"0:3,2:1"``: how every message and the CLI write weights."""
    return ",".join(f"{node}:{weights[node]}" for node in sorted(weights))


def described(weights: Weights, variable: Optional[str] = None) -> str:
    """``weights 0:3,2:1`` (``from PYNUMABIND_WEIGHTS=...`` when they came from there)."""
    text = f"weights {format_weights(weights)}"
    return text if variable is None else f"{text} (from {variable})"


def invalid_variable(variable: str, text: str, exc: Exception) -> ConfigError:
    """The error for a weights variable that does not read: names it and its value."""
    return ConfigError(
        f"invalid {variable}={shown(text)}: {exc}; give NODE:WEIGHT items such as 0:3,2:1 "
        f"(weights {MIN_WEIGHT} to {MAX_WEIGHT})"
    )


# ---------------------------------------------------------------- comparing


def proportional(a: Weights, b: Weights) -> bool:
    """Whether ``a`` and ``b`` split pages the same way: same nodes, proportional weights."""
    if set(a) != set(b):
        return False
    total_a, total_b = sum(a.values()), sum(b.values())
    return all(a[n] * total_b == b[n] * total_a for n in a)


def kernel_difference(requested: Weights, kernel: Mapping[int, Optional[int]]) -> Optional[str]:
    """Why the kernel's weights split pages otherwise than ``requested``; None when they agree.

    ``kernel`` is the kernel's weight for each requested node (``None``:
    it shows none for that node, and uses 1).  Only the requested nodes
    count: a process's policy interleaves over them alone.
    """
    used = {n: (kernel.get(n) or 1) for n in requested}
    if proportional(requested, used):
        return None
    return (
        f"requested {described(requested)}, but the kernel's system-wide weights for "
        f"these nodes are {format_weights(used)}"
    )


def exact_shares(total: int, weights: Weights) -> Dict[int, int]:
    """``total`` split in proportion to ``weights``, exactly (largest remainder; ties: lower id)."""
    whole = sum(weights.values())
    nodes = sorted(weights)
    floors = {n: total * weights[n] // whole for n in nodes}
    left = total - sum(floors.values())
    by_remainder = sorted(nodes, key=lambda n: (-(total * weights[n] % whole), n))
    for node in by_remainder[:left]:
        floors[node] += 1
    return floors


def _rounded(value: float) -> int:
    """``value`` to the nearest integer, halves up (not Python's halves to even)."""
    whole = int(value)
    return whole + 1 if value - whole >= 0.5 else whole


def from_bandwidth(bandwidth: Mapping[int, float]) -> Dict[int, int]:
    """Weights proportional to ``bandwidth`` (node -> GB/s, each > 0): see the module docstring.

    ``{0: 40.0, 2: 10.0}`` -> ``{0: 4, 2: 1}``; ascending by node, each from
    :data:`MIN_WEIGHT` to :data:`MAX_WEIGHT`, with no common divisor above 1.
    """
    if not bandwidth:
        raise ValueError("weights from bandwidth need at least one node")
    if any(not (value > 0) or value == float("inf") for value in bandwidth.values()):
        raise ValueError(f"bandwidths must be finite and positive: {dict(bandwidth)}")
    fastest = max(bandwidth.values())
    total = sum(bandwidth.values())
    nodes = sorted(bandwidth)
    weights: Dict[int, int] = {}
    for top in range(MIN_WEIGHT, MAX_WEIGHT + 1):
        weights = {
            n: min(MAX_WEIGHT, max(MIN_WEIGHT, _rounded(top * bandwidth[n] / fastest)))
            for n in nodes
        }
        whole = sum(weights.values())
        if all(
            abs(weights[n] / whole - bandwidth[n] / total) * 100 <= BANDWIDTH_POINTS for n in nodes
        ):
            break
    divisor = 0
    for weight in weights.values():
        divisor = math.gcd(divisor, weight)
    return {n: w // divisor for n, w in weights.items()}


# ------------------------------------------------------------------ judging


def _share(part: int, total: int) -> str:
    return f"{100 * part / total:.1f}%"


def split_problems(
    weights: Weights,
    counts: Mapping[int, int],
    run_pages: Optional[Mapping[int, int]] = None,
) -> Tuple[str, ...]:
    """Each node of ``weights`` whose share of ``counts`` is off beyond the tolerance.

    ``counts`` are pages per node (nodes without a weight are not counted);
    ``run_pages`` the pages of one run of each node as they were placed (see
    the module docstring: the tolerance widens to one run).  No page on the
    weighted nodes: nothing to judge.
    """
    total = sum(counts.get(n, 0) for n in weights)
    if total <= 0:
        return ()
    whole = sum(weights.values())
    problems: List[str] = []
    for node in sorted(weights):
        got, weight = counts.get(node, 0), weights[node]
        off = abs(got * whole - total * weight)  # in pages, times whole
        run = (run_pages or {}).get(node, 0)
        if off * 100 > TOLERANCE_POINTS * total * whole and off > run * whole:
            widened = f" or one run, {counted(run, 'page')}" if run else ""
            problems.append(
                f"node {node} holds {got} of the {total} pages ({_share(got, total)}), its "
                f"weight {weight} of {whole} asks for {_share(weight, whole)} "
                f"(tolerance {TOLERANCE_POINTS} percentage points{widened})"
            )
    return tuple(problems)


# ----------------------------------------------------------------- layout


class Run(tuple):  # type: ignore[type-arg]
    """``length`` bytes from ``start``, all on ``node``: a ``(start, length, node)`` tuple.

    A plain tuple subclass, not a ``NamedTuple``: this module is on the
    options' import path, and a class made by ``typing`` costs more to load.
    """

    __slots__ = ()

    def __new__(cls, start: int, length: int, node: int) -> Run:
        return tuple.__new__(cls, (start, length, node))

    @property
    def start(self) -> int:
        return int(self[0])

    @property
    def length(self) -> int:
        return int(self[1])

    @property
    def node(self) -> int:
        return int(self[2])

    def __repr__(self) -> str:
        return f"Run(start={self.start:#x}, length={self.length}, node={self.node})"


class Layout:
    """The runs of a range, and the sizes they were cut by (see :func:`weighted_runs`).

    ``pages_per_point``: pages per weight point (a node of weight ``w`` gets
    runs of ``w`` points); ``grain_pages``: what the run boundaries are
    aligned to (1, or the pages of a huge page).
    """

    __slots__ = ("grain_pages", "pages_per_point", "runs")

    def __init__(self, runs: Tuple[Run, ...], pages_per_point: int, grain_pages: int) -> None:
        self.runs = runs
        self.pages_per_point = pages_per_point
        self.grain_pages = grain_pages

    def __repr__(self) -> str:
        return (
            f"Layout({len(self.runs)} runs, pages_per_point={self.pages_per_point}, "
            f"grain_pages={self.grain_pages})"
        )

    def run_pages(self, weights: Weights) -> Dict[int, int]:
        """The pages of one full run of each node."""
        return {n: w * self.pages_per_point for n, w in weights.items()}

    def pages(self, page: int) -> Dict[int, int]:
        """Pages per node over every run."""
        out: Dict[int, int] = {}
        for run in self.runs:
            out[run.node] = out.get(run.node, 0) + run.length // page
        return out


def _point(pages: int, weights: Weights, hp: int) -> Tuple[int, int]:
    """(pages per weight point, grain in pages) for ``pages`` pages (see the module docstring)."""
    whole = sum(weights.values())
    point = max(1, -(-pages * len(weights) // (whole * MAX_RUNS)))
    if hp > 1 and pages >= hp * whole * MIN_HUGE_CYCLES:
        return -(-point // hp) * hp, hp
    return point, 1


def weighted_runs(start: int, length: int, weights: Weights, *, page: int, huge: int = 0) -> Layout:
    """The runs :func:`~pynumabind.bind_memory` binds ``length`` bytes at ``start`` in.

    ``start`` and ``length`` are page-aligned (``page`` bytes a page);
    ``huge`` is the transparent huge page size (0: none).  See the module
    docstring for the layout; each node gets exactly its
    :func:`exact_shares` of the pages.
    """
    if length <= 0 or start % page or length % page:
        raise ValueError(f"not a page-aligned range: {length} bytes at {start:#x}")
    pages = length // page
    hp = huge // page if huge > page else 1
    point, grain = _point(pages, weights, hp)
    left = exact_shares(pages, weights)
    nodes = sorted(weights)
    shift = (start // page) % grain  # the first run ends on a grain boundary
    cut: List[List[int]] = []  # [pages, node], adjacent runs of one node merged
    placed = 0
    while placed < pages:
        for node in nodes:
            if not left[node]:
                continue
            size = min(weights[node] * point - shift, left[node])
            shift = 0
            left[node] -= size
            placed += size
            if cut and cut[-1][1] == node:
                cut[-1][0] += size
            else:
                cut.append([size, node])
    runs: List[Run] = []
    at = start
    for size, node in cut:
        runs.append(Run(at, size * page, node))
        at += size * page
    return Layout(tuple(runs), point, grain)
