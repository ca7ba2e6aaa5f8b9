"""The integration helpers' once-per-process cache never hands back a stale Binding.

``bind_gpu``/``bind_gpus`` remember the Binding they made (``_BOUND``) so a
second hook in the same process does not bind again.  Before the fix, after
``restore()`` a second ``bind_gpu(1)`` returned the restored object (the
process unbound, the Binding claiming CPUs bound), and in a forked child the
cache returned the parent's Binding.  Real binds in child interpreters, on
the two-node snapshot over this machine's CPUs 0 and 1.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict

from ..support.childproc import run_in_child
from . import child_bound_cache
from .helpers import require_two_cpus


def _run(body: Callable[[], Dict[str, Any]], snapshot: Path) -> Dict[str, Any]:
    require_two_cpus()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    env.update({"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "0,1"})
    result, _ = run_in_child(body, env=env, timeout=120)
    assert isinstance(result, dict)
    return result


def test_a_restored_binding_is_never_handed_back(snapshot: Path) -> None:
    result = _run(child_bound_cache.restored_binding_not_handed_back, snapshot)
    assert result["cached"] is True  # in force: bound once per process
    assert result["unbound"] == "0-1"
    assert result["fresh"] is True and result["restored"] is False
    assert result["bound"] == "1"  # bound again, for real


def test_a_forked_child_binds_for_itself(snapshot: Path) -> None:
    result = _run(child_bound_cache.forked_child_binds_for_itself, snapshot)
    assert "error" not in result, result
    assert result["empty"] is True  # the cache was dropped at fork
    assert result["fresh"] is True and result["pid"] is True
    assert result["bound"] == "1"
    assert result["restored"] == "1"  # the mask the child inherited, bound by its parent
    assert result["parent_still_cached"] is True
