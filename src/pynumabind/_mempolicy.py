"""What each memory policy means, in one table: the kernel's modes, and a row per policy.

A :class:`~pynumabind.model.MemoryPolicy` is a name (``"bind"``); what it
does is its :class:`PolicyRow` in :data:`POLICIES`, read by everything that
acts on a policy:

* the planner (:mod:`pynumabind.planner._memory`): whether the policy takes
  nodes, and the words its reason uses;
* the bind step (:func:`pynumabind.binding._apply.policy_request`) and buffer
  placement (:mod:`pynumabind.binding.placement`): the kernel mode set, and
  the fallback on a kernel without it (:meth:`PolicyRow.kernel_request`);
* buffer placement again: whether the policy can place a buffer at all;
* the verifier (:mod:`pynumabind.binding._verify`) and the placement census
  (:mod:`pynumabind.binding._census`): how the pages are judged
  (:data:`INSIDE`, :data:`SPILL`, :data:`SPREAD`, :data:`WEIGHTED`,
  :data:`ALLOWED`), found from the mode the kernel holds (:func:`row_of_mode`);
* the options (:mod:`pynumabind.planner._request`): whether
  ``interleave_nodes`` may name its nodes (``spreads``) and whether it takes
  weights (``weighted``; the weights themselves are :mod:`pynumabind._weights`).

A test walks ``MemoryPolicy`` and fails on a policy without a row, so a new
policy is one row here plus the planner's rule for its nodes.

The ``MPOL_*`` numbers are the kernel's ABI (``linux/mempolicy.h``), written
once, here: :mod:`pynumabind._os.libnuma` passes them to the syscalls and
takes them from this module.  A mode newer than the kernels pynumabind
otherwise runs on (:data:`MODE_SINCE`) is probed before it is used, and its
row names the older mode to fall back on.

A value module: no I/O, and nothing imported but :mod:`pynumabind.errors`
(for ``format_ids``), so the OS layer may import it without loading the
model.  Rows are keyed by the policy's name, which is what a
``MemoryPolicy`` is (a ``str`` enum), so ``POLICIES[MemoryPolicy.BIND]``
works.
"""

from __future__ import annotations

from ._text import format_ids, named

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Callable, Dict, FrozenSet, Optional, Tuple

__all__ = [
    "ALLOWED",
    "INSIDE",
    "MODE_NAMES",
    "MODE_NUMBERS",
    "MODE_SINCE",
    "NODELESS_MODES",
    "ONE_NODE_MODES",
    "POLICIES",
    "SPILL",
    "SPREAD",
    "VERIFY_PAGES",
    "WEIGHTED",
    "PolicyRow",
    "placing_policies",
    "row_of_mode",
]

# ------------------------------------------------------------ kernel modes

# Memory policy modes (linux/mempolicy.h).
MPOL_DEFAULT = 0
MPOL_PREFERRED = 1
MPOL_BIND = 2
MPOL_INTERLEAVE = 3
MPOL_LOCAL = 4
MPOL_PREFERRED_MANY = 5
MPOL_WEIGHTED_INTERLEAVE = 6

MODE_NAMES: Dict[int, str] = {
    MPOL_DEFAULT: "MPOL_DEFAULT",
    MPOL_PREFERRED: "MPOL_PREFERRED",
    MPOL_BIND: "MPOL_BIND",
    MPOL_INTERLEAVE: "MPOL_INTERLEAVE",
    MPOL_LOCAL: "MPOL_LOCAL",
    MPOL_PREFERRED_MANY: "MPOL_PREFERRED_MANY",
    MPOL_WEIGHTED_INTERLEAVE: "MPOL_WEIGHTED_INTERLEAVE",
}
MODE_NUMBERS: Dict[str, int] = {name: number for number, name in MODE_NAMES.items()}

#: Modes that take no node mask.
NODELESS_MODES: FrozenSet[int] = frozenset({MPOL_DEFAULT, MPOL_LOCAL})
#: Modes that hold one node: given a mask of several, the kernel keeps the lowest.
ONE_NODE_MODES: FrozenSet[int] = frozenset({MPOL_PREFERRED})
#: The Linux version (major, minor) that added each mode newer than the rest.
MODE_SINCE: Dict[int, Tuple[int, int]] = {
    MPOL_PREFERRED_MANY: (5, 15),
    MPOL_WEIGHTED_INTERLEAVE: (6, 9),
}

# ------------------------------------------------------------ verify's rules
#
# How the verifier judges where freshly touched pages landed under a policy
# (the rules themselves are pynumabind.binding._verify's).

#: Every page on the policy's nodes.
INSIDE = "inside"
#: On the policy's nodes, unless they are nearly full: spilling is then the policy working.
SPILL = "spill"
#: On the policy's nodes, and on more than one of them when there are several.
SPREAD = "spread"
#: On the policy's nodes, each node's share of the pages in proportion to its
#: weight (within the tolerance :func:`pynumabind._weights.split_problems` states).
WEIGHTED = "weighted"
#: Anywhere among the process's allowed memory nodes.
ALLOWED = "allowed"
#: Fresh pages the verifier touches, by default, to see where they land.
VERIFY_PAGES = 16


class PolicyRow:
    """One memory policy: the kernel mode it sets and how every layer treats it.

    * ``policy``: its name, a :class:`~pynumabind.model.MemoryPolicy` value;
    * ``mode``: the ``MPOL_*`` mode it sets (``None``: it leaves the policy
      alone);
    * ``fallback``: the mode set instead where the kernel lacks ``mode``
      (one of :data:`MODE_SINCE`: :attr:`since` says which Linux added it),
      and ``fallback_said``, the end of the note that says so (``{nodes}``:
      the nodes kept);
    * ``takes_nodes``: whether it is set on nodes (a plan names them);
    * ``places``: whether :func:`~pynumabind.bind_memory` and
      :func:`~pynumabind.memory_on` can place a buffer with it;
    * ``judge``: how the verifier judges the pages (:data:`INSIDE`,
      :data:`SPILL`, :data:`SPREAD`, :data:`WEIGHTED`, :data:`ALLOWED`;
      ``None``: not judged);
    * ``described``: how the planner's reason names it ("memory policy
      bind (strict): node 0"), followed by its nodes when it takes nodes;
    * ``spreads``: it spreads pages over several nodes, so
      ``interleave_nodes`` may name them;
    * ``weighted``: it takes a weight per node (``weights``).
    """

    __slots__ = (
        "described",
        "fallback",
        "fallback_said",
        "judge",
        "mode",
        "places",
        "policy",
        "spreads",
        "takes_nodes",
        "weighted",
    )

    def __init__(
        self,
        policy: str,
        mode: Optional[int],
        *,
        takes_nodes: bool,
        places: bool,
        judge: Optional[str],
        described: str,
        fallback: Optional[int] = None,
        fallback_said: str = "",
        spreads: bool = False,
        weighted: bool = False,
    ) -> None:
        self.policy = policy
        self.mode = mode
        self.takes_nodes = takes_nodes
        self.places = places
        self.judge = judge
        self.described = described
        self.fallback = fallback
        self.fallback_said = fallback_said
        self.spreads = spreads
        self.weighted = weighted

    def __repr__(self) -> str:
        mode = None if self.mode is None else MODE_NAMES.get(self.mode, str(self.mode))
        return f"PolicyRow({self.policy!r}, {mode})"

    @property
    def since(self) -> Optional[Tuple[int, int]]:
        """The Linux version that added :attr:`mode`, when it is newer than the rest."""
        return None if self.mode is None else MODE_SINCE.get(self.mode)

    def kernel_request(
        self,
        nodes: FrozenSet[int],
        supports: Callable[[int], Optional[bool]],
        kernel: Optional[Callable[[], str]] = None,
    ) -> Tuple[Optional[int], FrozenSet[int], Optional[str]]:
        """The mode and nodes to set for this policy on ``nodes``, and a note when they differ.

        ``supports(mode)`` says whether the kernel accepts a mode (``None``:
        it could not tell); it is asked only about a mode of
        :data:`MODE_SINCE`.  The fallback is set without asking where it
        means the same on ``nodes``: a one-node mode on one node.  Where the
        fallback holds one node and ``nodes`` are several, it keeps the
        lowest.  ``nodes`` must not be empty for a policy that takes them.
        ``kernel()`` gives the running kernel's release (``uname -r``), which
        the note names when given; it is called only to write the note.
        """
        if self.mode is None:
            return None, frozenset(), None
        if not self.takes_nodes:
            return self.mode, frozenset(), None
        since, fallback = self.since, self.fallback
        if since is None or fallback is None:
            return self.mode, nodes, None
        one_node = fallback in ONE_NODE_MODES
        if one_node and len(nodes) == 1:
            return fallback, nodes, None
        supported = supports(self.mode)
        if supported:
            return self.mode, nodes, None
        kept = frozenset({min(nodes)}) if one_node else nodes
        running = "this kernel" if kernel is None else f"this kernel (Linux {kernel()})"
        why = (
            f"{running} lacks it (Linux < {since[0]}.{since[1]})"
            if supported is False
            else "it could not be probed"
        )
        note = (
            f"{self.policy} on {named('node', nodes)} needs {MODE_NAMES[self.mode]} and "
            f"{why}; {self.fallback_said.format(nodes=format_ids(kept))}"
        )
        return fallback, kept, note


#: Every policy's row, by its name, in the order messages list them.
POLICIES: Dict[str, PolicyRow] = {
    row.policy: row
    for row in (
        PolicyRow(
            "bind",
            MPOL_BIND,
            takes_nodes=True,
            places=True,
            judge=INSIDE,
            described="bind (strict)",
        ),
        PolicyRow(
            "preferred",
            MPOL_PREFERRED_MANY,
            fallback=MPOL_PREFERRED,
            fallback_said="preferring node {nodes} only",
            takes_nodes=True,
            places=True,
            judge=SPILL,
            described="preferred (local first, spills over instead of OOM)",
        ),
        PolicyRow(
            "interleave",
            MPOL_INTERLEAVE,
            takes_nodes=True,
            places=True,
            judge=SPREAD,
            described="interleave across the rank's own nodes (the default)",
            spreads=True,
        ),
        PolicyRow(
            "weighted-interleave",
            MPOL_WEIGHTED_INTERLEAVE,
            fallback=MPOL_INTERLEAVE,
            fallback_said="interleaving evenly over nodes {nodes} instead, without weights",
            takes_nodes=True,
            places=True,
            judge=WEIGHTED,
            described="weighted interleave (pages in proportion to each node's weight)",
            spreads=True,
            weighted=True,
        ),
        PolicyRow(
            "local",
            MPOL_LOCAL,
            takes_nodes=False,
            places=False,
            judge=ALLOWED,
            described="local: allocate on the node of the faulting CPU",
        ),
        PolicyRow(
            "none",
            None,
            takes_nodes=False,
            places=False,
            judge=None,
            described="none: left alone",
        ),
    )
}


def _by_mode() -> Dict[int, PolicyRow]:
    # A row's own mode names it; a mode that is only some row's fallback, that row.
    found = {row.fallback: row for row in POLICIES.values() if row.fallback is not None}
    found.update((row.mode, row) for row in POLICIES.values() if row.mode is not None)
    return found


_BY_MODE = _by_mode()


def row_of_mode(mode: int) -> Optional[PolicyRow]:
    """The row a policy the kernel holds in ``mode`` is judged by; None for none's.

    A mode is the row's whose own mode it is, else the row it is the
    fallback of (``MPOL_PREFERRED``: preferred).
    """
    return _BY_MODE.get(mode)


def placing_policies() -> Tuple[str, ...]:
    """The policies that place a buffer, in the table's order."""
    return tuple(row.policy for row in POLICIES.values() if row.places)
