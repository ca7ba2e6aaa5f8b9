"""Child bodies of binding/test_weighted_binding.py: weighted interleave bound for real.

Run through :func:`childproc.run_in_child`, so the pytest process is never
left bound.  This kernel (6.18) has ``MPOL_WEIGHTED_INTERLEAVE`` and one node.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Tuple

from pynumabind._os import libnuma as _libnuma
from pynumabind.binding import bind_current_process


class _Keep(logging.Handler):
    """Keeps (level, message) of every record of the pynumabind logger."""

    def __init__(self) -> None:
        super().__init__()
        self.records: List[Tuple[str, str]] = []
        logger = logging.getLogger("pynumabind")
        logger.addHandler(self)
        logger.setLevel(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname, record.getMessage()))


def _bound(**keywords: Any) -> Dict[str, Any]:
    keep = _Keep()
    binding = bind_current_process(0, nprocs=1, environ={}, **keywords)
    verify = binding.verify()
    policy = _libnuma.get_mempolicy()
    out = {
        "binding": binding.to_dict(),
        "verify": verify.to_dict(),
        "policy": [policy.kernel_policy, sorted(policy.nodes)],
        "warnings": [m for level, m in keep.records if level == "WARNING"],
    }
    binding.restore()
    return out


def weighted_without_weights() -> Dict[str, Any]:
    return _bound(policy="weighted-interleave")


def weighted_with_weights(weights: str) -> Dict[str, Any]:
    return _bound(policy="weighted-interleave", weights=weights)


def weighted_on_an_older_kernel() -> Dict[str, Any]:
    # Linux < 6.9 refuses the mode: the probe's answer, emulated at its one boundary.
    _libnuma._state.setdefault("modes", {})[_libnuma.MPOL_WEIGHTED_INTERLEAVE] = False
    return _bound(policy="weighted-interleave", weights={0: 3})
