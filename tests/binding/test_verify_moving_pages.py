"""verify() and pages the kernel is moving at the moment it looks.

``move_pages(nodes=NULL)`` answers ``-ENOENT`` for a page under migration
(compaction, NUMA balancing), as if it were not there.  The QEMU guest tests
saw it once for a freshly touched page; verify() must not call a binding
broken for that, but must still report a page that stays missing.  A page
under migration is no page in ``/proc/self/pagemap`` either (a migration
entry: "swapped", not "present"), which verify() also reads for a page
``move_pages`` misses, so the scripted migration answers both.
"""

from __future__ import annotations

import errno
from typing import Any, Iterator, List, Sequence

import pytest

from pynumabind import binding as binding_module
from pynumabind._os import libnuma as _libnuma
from pynumabind._os import proc as _proc
from pynumabind.binding import _verify
from pynumabind.model import MemoryPolicy, Plan

pytestmark = pytest.mark.skipif(not _libnuma.available(), reason="libnuma unavailable")


@pytest.fixture
def bound_to_node0() -> Iterator[binding_module.Binding]:
    node = min(_libnuma.get_mems_allowed())
    plan = Plan(rank=0, gpu_info=None, cpus=None, mems=frozenset({node}), policy=MemoryPolicy.BIND)
    binding = binding_module.apply_plan(plan, on_error="raise")
    try:
        yield binding
    finally:
        binding.restore()


MIGRATION_ENTRY = 1 << 62  # pagemap: swapped (a migration entry), not present


def _answers(monkeypatch: pytest.MonkeyPatch, bad_calls: int) -> List[int]:
    """Make the first ``bad_calls`` page queries report page 0 as under migration."""
    real = _libnuma.page_nodes
    real_pagemap = _proc.pagemap
    calls: List[int] = []

    def flaky(buffer: Any) -> List[int]:
        found = real(buffer)
        calls.append(len(calls))
        if len(calls) <= bad_calls:
            found[0] = -errno.ENOENT
        return found

    def migrating(addresses: Sequence[int]) -> List[int]:
        entries = real_pagemap(addresses)
        return [MIGRATION_ENTRY] * len(entries) if len(calls) <= bad_calls else entries

    monkeypatch.setattr(_libnuma, "page_nodes", flaky)
    monkeypatch.setattr(_proc, "pagemap", migrating)
    monkeypatch.setattr(_verify, "_SETTLE_PAUSE", 0.0)
    return calls


def test_page_under_migration_is_asked_again(
    bound_to_node0: binding_module.Binding, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _answers(monkeypatch, bad_calls=2)
    check = bound_to_node0.verify()
    assert check.ok, check.problems
    assert len(calls) == 3
    assert min(check.page_nodes) >= 0


def test_page_that_stays_missing_is_reported(
    bound_to_node0: binding_module.Binding, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _answers(monkeypatch, bad_calls=100)
    check = bound_to_node0.verify()
    assert not check.ok
    assert any("test pages [0] not present" in p for p in check.problems), check.problems
    assert len(calls) == _verify._SETTLE_TRIES
