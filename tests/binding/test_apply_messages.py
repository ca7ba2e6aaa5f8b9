"""The words of a failed step come from values: ``_apply.fix_for`` and ``cpu_error`` run no syscall.

The facts (this process's allowed memory nodes, its cpuset) are read first,
by :func:`pynumabind.binding._apply.allowed_mems_for` and the CPU step, through
:mod:`pynumabind._os.proc`; the message functions only format what they are
given.  Checked by making every reader fail loudly while they run.
"""

from __future__ import annotations

import errno

import pytest

from pynumabind._os import libnuma as _libnuma
from pynumabind._os import proc as _proc
from pynumabind.binding import _apply
from pynumabind.errors import LibnumaUnavailableError, NumaSyscallError


@pytest.fixture
def no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("a message function read the process's state")

    for name in ("mems_allowed", "cpuset", "process_affinity", "status_mems_allowed"):
        monkeypatch.setattr(_proc, name, refuse)
    monkeypatch.setattr(_libnuma, "get_mems_allowed", refuse)


def test_fix_for_formats_the_allowed_nodes_it_is_given(no_reads: None) -> None:
    einval = NumaSyscallError(errno.EINVAL, "set_mempolicy(MPOL_BIND)", {3})
    fix = _apply.fix_for(einval, "memory policy", frozenset({0, 1, 2}))
    assert "allowed memory nodes (0-2, its cpuset.mems)" in fix
    assert "(unknown, its cpuset.mems)" in _apply.fix_for(einval, "memory policy")
    eperm = NumaSyscallError(errno.EPERM, "set_mempolicy(MPOL_BIND)", {0})
    assert "SYS_NICE" in _apply.fix_for(eperm, "memory policy", frozenset({0}))
    assert "migrate_pages" in _apply.fix_for(eperm, "page migration")
    missing = LibnumaUnavailableError("cannot load libnuma.so.1")
    assert "install the libnuma runtime" in _apply.fix_for(missing, "memory policy")


def test_cpu_error_formats_the_cpuset_it_is_given(no_reads: None) -> None:
    error = _apply.cpu_error(
        frozenset({4}),
        frozenset({0, 1}),
        "CPUs 4 are not allowed here",
        ("/job", frozenset({0, 1})),
    )
    message = str(error)
    assert "cannot bind to CPUs 4: CPUs 4 are not allowed here" in message
    assert "(cpuset /job allows 0-1; affinity mask 0-1)" in message
    assert "(affinity mask 0-1)" in str(_apply.cpu_error(frozenset({4}), frozenset({0, 1}), "x"))


def test_the_facts_are_read_only_for_an_error_about_them() -> None:
    einval = NumaSyscallError(errno.EINVAL, "set_mempolicy(MPOL_BIND)", {9})
    assert _apply.allowed_mems_for(einval) == _proc.mems_allowed()
    assert _apply.allowed_mems_for(NumaSyscallError(errno.EPERM, "mbind")) is None
    assert _apply.allowed_mems_for(_apply.ThreadChurn("threads kept appearing")) is None
