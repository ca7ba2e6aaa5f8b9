"""Weighted interleave bound on the real kernel (6.18, one node), and its weights' rules.

What needs two nodes (a split, requested weights the kernel's differ from, the
kernel's weights written) runs in the QEMU guests (``tests/vm/guest``); here a
real ``set_mempolicy(MPOL_WEIGHTED_INTERLEAVE)`` on node 0, the kernel's real
weights file read, and the rules of the bind step on the values they see.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pynumabind._os import libnuma as _libnuma
from pynumabind._os import weights as _system
from pynumabind.binding import _apply, apply_plan
from pynumabind.errors import ConfigError, NumaSyscallError
from pynumabind.model import MemoryPolicy, Plan

from ..support.childproc import run_in_child
from . import child_weights

WEIGHTS = Path("/sys/kernel/mm/mempolicy/weighted_interleave")

needs_node0 = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or 0 not in _libnuma.get_mems_allowed(),
    reason="needs CPUs 0-1 and memory node 0",
)
needs_weights = pytest.mark.skipif(
    not (WEIGHTS / "node0").is_file(), reason="needs Linux 6.9+ (weighted interleave)"
)


@needs_node0
@needs_weights
def test_a_process_binds_weighted_interleave_and_follows_the_kernels_weights() -> None:
    result, _ = run_in_child(child_weights.weighted_without_weights)
    binding = result["binding"]
    assert result["policy"] == ["MPOL_WEIGHTED_INTERLEAVE", [0]]
    assert binding["kernel_policy"] == "MPOL_WEIGHTED_INTERLEAVE"
    weight = int((WEIGHTS / "node0").read_text())
    assert binding["kernel_weights"] == {"0": weight}
    assert binding["weights_mismatch"] is None and binding["plan"]["weights"] is None
    assert [n for n in binding["notes"] if "follows the kernel's system-wide weights" in n] == [
        n for n in binding["notes"] if n.endswith(f": 0:{weight}")
    ]
    assert result["verify"]["ok"] is True, result["verify"]
    assert result["warnings"] == []


@needs_node0
@needs_weights
def test_requested_weights_on_one_node_agree_with_any_kernel_weight() -> None:
    # One node: every weight puts all pages there, so no mismatch is reported.
    result, _ = run_in_child(child_weights.weighted_with_weights, "0:200")
    binding = result["binding"]
    assert binding["plan"]["weights"] == {"0": 200}
    assert binding["weights_mismatch"] is None and result["warnings"] == []
    assert result["verify"]["ok"] is True and result["verify"]["notes"] == []


@needs_node0
def test_before_linux_6_9_it_is_interleave_with_one_note_naming_the_kernel() -> None:
    result, _ = run_in_child(child_weights.weighted_on_an_older_kernel)
    binding = result["binding"]
    assert result["policy"] == ["MPOL_INTERLEAVE", [0]]
    assert binding["kernel_weights"] is None and binding["weights_mismatch"] is None
    assert binding["notes"] == [
        f"weighted-interleave on node 0 needs MPOL_WEIGHTED_INTERLEAVE and this kernel "
        f"(Linux {os.uname().release}) lacks it (Linux < 6.9); interleaving evenly over nodes 0 "
        "instead, without weights"
    ]
    assert result["verify"]["ok"] is True
    assert result["warnings"] == []


def _plan(policy: str = "WEIGHTED_INTERLEAVE", **changes: object) -> Plan:
    return Plan(
        rank=0,
        gpu_info=None,
        cpus=None,
        mems=frozenset({0}),
        policy=MemoryPolicy[policy],
        **changes,  # type: ignore[arg-type]
    )


def test_set_system_weights_needs_weights_to_set() -> None:
    with pytest.raises(ConfigError, match=r"needs policy 'weighted-interleave' with weights="):
        apply_plan(_plan(), set_system_weights=True)
    with pytest.raises(ConfigError, match=r"this plan has policy 'bind'\)"):
        apply_plan(_plan("BIND"), set_system_weights=True)
    with pytest.raises(ConfigError, match="set_system_weights must be True or False"):
        apply_plan(_plan(), set_system_weights="yes")  # type: ignore[arg-type]


def test_requested_weights_the_kernels_differ_from_are_one_mismatch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two nodes, as a guest has them: the kernel's weights given at the reader.
    shown = _system.SystemWeights({0: 1, 2: 1}, True, "/sys/x")
    monkeypatch.setattr(_system, "read_weights", lambda root="/sys": shown)
    request = _apply.PolicyRequest(_libnuma.MPOL_WEIGHTED_INTERLEAVE, frozenset({0, 2}))
    found = _apply._weighted(request, {0: 3, 2: 1}, False)
    assert found.kernel_weights == {0: 1, 2: 1} and found.write_weights is None
    assert found.mismatch is not None and found.mismatch.startswith(
        "requested weights 0:3,2:1, but the kernel's system-wide weights for these nodes are "
        "0:1,2:1: a process's (or a thread's) weighted interleave follows the kernel's"
    )
    assert "set_system_weights=True" in found.mismatch and "bind_memory(weights=" in found.mismatch
    assert _apply._weighted(request, {0: 5, 2: 5}, False).mismatch is None  # proportional
    written = _apply._weighted(request, {0: 3, 2: 1}, True)
    assert written.write_weights == {0: 3, 2: 1} and written.mismatch is None
    none = _apply._weighted(request, None, False)
    assert none.weights_note == (
        "weighted interleave over nodes 0,2 follows the kernel's system-wide weights, derived "
        "by the kernel (auto): 0:1,2:1"
    )


def test_a_failed_write_of_the_weights_says_what_to_do() -> None:
    denied = NumaSyscallError(errno.EACCES, "writing /sys/.../node0", {0})
    assert _apply.fix_for(denied, _apply.SYSTEM_WEIGHTS).startswith(
        "writing the kernel's interleave weights needs root"
    )
    missing = NumaSyscallError(errno.ENOENT, "writing /sys/.../node9", {9})
    assert "Linux < 6.9" in _apply.fix_for(missing, _apply.SYSTEM_WEIGHTS)
