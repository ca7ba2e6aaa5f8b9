"""Weighted interleave for buffers: bind_memory's exact runs and memory_on's thread policy.

This machine has one NUMA node: a real ``bind_memory(weights=...)`` here is one
run on node 0, and the kernel's own ``MPOL_WEIGHTED_INTERLEAVE`` is set for
real (Linux 6.18).  Runs over two nodes, and the census finding a page off its
run's node, need a second node: the census's rules are checked here with the
kernel's answers scripted at the ``_libnuma`` boundary, and for real in the
QEMU guests (``tests/vm/guest/test_guest_placement.py``: 64 MiB over nodes 0
and 2 at 3:1).
"""

from __future__ import annotations

import errno
import json
import mmap
import warnings
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

from pynumabind import _weights
from pynumabind._os import libnuma as _libnuma
from pynumabind._os import weights as _system
from pynumabind.binding import _census, placement
from pynumabind.binding.placement import bind_memory, memory_on
from pynumabind.errors import ConfigError, UnknownIdError

from ..support.topology_builders import make_topology

PAGE = mmap.PAGESIZE
WEIGHTS = Path("/sys/kernel/mm/mempolicy/weighted_interleave")
WEIGHTED = "weighted-interleave"

pytestmark = pytest.mark.skipif(
    not _libnuma.available() or 0 not in _libnuma.get_mems_allowed(),
    reason="needs the NUMA API and memory node 0",
)
needs_weights = pytest.mark.skipif(
    not (WEIGHTS / "node0").is_file(), reason="needs Linux 6.9+ (weighted interleave)"
)


@pytest.fixture(autouse=True)
def policy_unchanged() -> Iterator[None]:
    """No test may leave the thread's memory policy changed."""
    before = _libnuma.get_mempolicy()
    yield
    after = _libnuma.get_mempolicy()
    if after != before:
        _libnuma.set_mempolicy(before.mode, before.nodes, before.flags)
    assert after == before, f"policy left as {after}, was {before}"


def touched(pages: int) -> mmap.mmap:
    region = mmap.mmap(-1, pages * PAGE)
    for index in range(pages):
        region[index * PAGE] = 1
    return region


def start_of(region: mmap.mmap) -> int:
    ffi = _libnuma._ffi()
    pointer = ffi.from_buffer(region)
    try:
        return int(ffi.cast("uintptr_t", pointer))
    finally:
        ffi.release(pointer)


def test_requested_weights_are_runs_bound_with_mpol_bind() -> None:
    region = touched(256)
    result = bind_memory(region, policy=WEIGHTED, weights={0: 3})
    assert result.kernel_policy == "MPOL_BIND" and result.policy == WEIGHTED
    assert result.runs == 1 and result.nodes == frozenset({0})  # one node: one run
    assert result.pages_per_node == {0: 256} and result.complete
    assert result.weights == {0: 3} and result.in_proportion is True
    assert result.split_problems == ()
    policy = _libnuma.address_policy(start_of(region))
    assert (policy.mode, policy.nodes) == (_libnuma.MPOL_BIND, frozenset({0}))
    assert "node 0 (the weights 0:3)" in result.reasons
    assert "by weights 0:3" in result.summary()
    shown = json.loads(json.dumps(result.to_dict()))
    assert shown["weights"] == {"0": 3} and shown["runs"] == 1 and shown["in_proportion"]
    # The text form, and a node= naming the same nodes.
    assert bind_memory(region, policy=WEIGHTED, weights="0:1", node=0).weights == {0: 1}
    region.close()


@needs_weights
def test_without_weights_a_buffer_gets_the_kernels_mode_and_is_judged_by_its_weights() -> None:
    region = touched(64)
    result = bind_memory(region, node=0, policy=WEIGHTED)
    assert result.kernel_policy == "MPOL_WEIGHTED_INTERLEAVE" and result.runs == 1
    assert result.weights == {0: int((WEIGHTS / "node0").read_text())}
    assert result.in_proportion is True and result.pages_per_node == {0: 64}
    policy = _libnuma.address_policy(start_of(region))
    assert policy.mode == _libnuma.MPOL_WEIGHTED_INTERLEAVE
    assert any(r.startswith("the kernel's system-wide weights: 0:") for r in result.reasons)
    region.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"weights": {0: 3}}, ConfigError, "weights= go with policy='weighted-interleave'"),
        ({"policy": WEIGHTED, "weights": {0: 3}, "gpu": 0}, ConfigError, "not with gpu="),
        (
            {"policy": WEIGHTED, "weights": {0: 3}, "node": "0-1"},
            ConfigError,
            "weights= name nodes 0 but node= names 0-1",
        ),
        ({"policy": WEIGHTED, "weights": "0:0"}, ConfigError, "weights: weight out of range"),
        ({"policy": WEIGHTED, "weights": {0: 300}}, ConfigError, "weight 300 is not an integer"),
        ({"policy": WEIGHTED, "weights": {7: 1}}, UnknownIdError, "weights= names NUMA node(s) 7"),
        ({"policy": WEIGHTED}, ConfigError, "give node= (a NUMA node) or gpu="),
    ],
)
def test_bad_weights_arguments_are_typed_errors(kwargs: Any, error: type, words: str) -> None:
    region = touched(1)
    with pytest.raises(error) as caught:
        bind_memory(region, **kwargs)
    assert words in str(caught.value)
    with pytest.raises(error):
        memory_on(**kwargs)
    region.close()


@needs_weights
def test_memory_on_sets_weighted_interleave_for_the_block() -> None:
    with memory_on(policy=WEIGHTED, weights={0: 2}) as block:
        policy = _libnuma.get_mempolicy()
        assert (policy.mode, policy.nodes) == (_libnuma.MPOL_WEIGHTED_INTERLEAVE, frozenset({0}))
        fresh = touched(8)
        assert _libnuma.page_nodes(fresh) == [0] * 8
        fresh.close()
    assert block.kernel_policy == "MPOL_WEIGHTED_INTERLEAVE"
    assert block.reasons[0] == "node 0 (the weights 0:2)"


def test_memory_on_says_once_when_the_kernels_weights_split_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two nodes, as on a machine with a memory tier: the planner's machine is given,
    # the kernel's weights at their reader; the block is not entered (no node 2 here).
    machine = make_topology({0: "0-1", 2: ""})
    shown = _system.SystemWeights({0: 1, 2: 1}, None, "/sys/x")
    monkeypatch.setattr(_system, "read_weights", lambda root="/sys": shown)
    monkeypatch.setattr(_libnuma, "supports_mode", lambda mode: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        block = memory_on(policy=WEIGHTED, weights={0: 3, 2: 1}, topology=machine)
    assert [str(w.message) for w in caught] == [
        "memory_on: requested weights 0:3,2:1, but the kernel's system-wide weights for these "
        "nodes are 0:1,2:1: a thread's weighted interleave follows the kernel's (Linux has no "
        "per-task weights); bind_memory(buffer, weights=...) places a buffer by them exactly"
    ]
    assert block.kernel_policy == "MPOL_WEIGHTED_INTERLEAVE"
    assert block.reasons[-1] == str(caught[0].message)[len("memory_on: ") :]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        memory_on(policy=WEIGHTED, weights={0: 5, 2: 5}, topology=machine)  # proportional
    assert caught == []


def _scripted(monkeypatch: pytest.MonkeyPatch, where: dict) -> List[Tuple[List[int], Any]]:
    """The kernel's move_pages as a two-node kernel would answer it: ``where`` is the truth."""
    calls: List[Tuple[List[int], Any]] = []

    def move_pages(addresses: List[int], node: Any = None, flags: int = 0) -> Tuple[int, List[int]]:
        calls.append((list(addresses), node))
        if node is not None:
            for address in addresses:
                where[address] = node
        return 0, [where.get(a, -errno.ENOENT) for a in addresses]

    monkeypatch.setattr(_libnuma, "move_pages_status", move_pages)
    return calls


def test_the_census_judges_each_page_by_its_own_runs_node(monkeypatch: pytest.MonkeyPatch) -> None:
    start = 0x100000
    layout = _weights.weighted_runs(start, 16 * PAGE, {0: 3, 2: 1}, page=PAGE)
    segments = [(r.start, r.length, frozenset({r.node})) for r in layout.runs]
    assert [(r.length // PAGE, r.node) for r in layout.runs] == [(3, 0), (1, 2)] * 4
    truth = {start + i * PAGE: (2 if i % 4 == 3 else 0) for i in range(16)}
    truth[start + 3 * PAGE] = 0  # a node-2 run's page left on node 0
    calls = _scripted(monkeypatch, truth)
    counted = _census.count_pages(
        segments, True, {}, weights={0: 3, 2: 1}, run_pages=layout.run_pages({0: 3, 2: 1})
    )
    assert counted.per_node == {0: 12, 2: 4} and counted.not_moved == {}
    assert ([start + 3 * PAGE], 2) in calls  # asked, explicitly, onto its run's node
    assert counted.split_problems == ()
    # With move=False the page stays, counted as not asked, and the split says so.
    truth = {start + i * PAGE: 0 for i in range(16)}
    _scripted(monkeypatch, truth)
    counted = _census.count_pages(segments, False, {}, weights={0: 3, 2: 1})
    assert counted.not_moved == {placement.NOT_ASKED: 4}
    assert counted.split_problems[1].startswith("node 2 holds 0 of the 16 pages (0.0%)")


def test_runs_are_bound_one_mbind_each_on_the_real_kernel() -> None:
    region = touched(12)
    start = start_of(region)
    segments = tuple((start + i * 4 * PAGE, 4 * PAGE, frozenset({0})) for i in range(3))
    placement._mbind(segments, _libnuma.MPOL_BIND, _libnuma.MPOL_MF_MOVE)
    for segment_start, _, _ in segments:
        policy = _libnuma.address_policy(segment_start)
        assert (policy.mode, policy.nodes) == (_libnuma.MPOL_BIND, frozenset({0}))
    counted = _census.count_pages(segments, True, {}, weights={0: 1})
    assert counted.per_node == {0: 12} and counted.split_problems == ()
    region.close()
