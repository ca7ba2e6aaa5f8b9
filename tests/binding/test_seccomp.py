"""EPERM for real: workers under a real seccomp filter (see ``seccomp_filter``).

The filter is installed in a child interpreter before pynumabind (and
libnuma) load, as a container runtime would.  ``ALL_NUMA`` mirrors Docker's
default profile for a container without CAP_SYS_NICE (get_mempolicy, mbind
and set_mempolicy denied; migrate_pages and move_pages always denied);
``MIGRATION_ONLY`` mirrors the same profile with ``--cap-add SYS_NICE``.
"""

from __future__ import annotations

import errno
import os

import pytest

from ..support import seccomp_filter
from ..support.childproc import run_in_child
from . import child_seccomp

pytestmark = [
    pytest.mark.skipif(not seccomp_filter.supported(), reason="filter is written for x86-64"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1"),
]

MIGRATION_ONLY = (seccomp_filter.NR_MIGRATE_PAGES, seccomp_filter.NR_MOVE_PAGES)


def _run(denied, *, on_error="warn", policy="PREFERRED", migrate=False):
    denied_list = ",".join(str(nr) for nr in denied)
    return run_in_child(child_seccomp.bind_under_filter, denied_list, on_error, policy, migrate)


def test_filter_really_denies_with_eperm() -> None:
    result, _ = run_in_child(child_seccomp.filter_denies)
    assert result["set_mempolicy"] == errno.EPERM
    assert result["mbind"] == errno.EPERM
    assert result["get_mempolicy"] == 0  # not in this filter: still allowed
    assert result["getpid_works"]
    assert result["seccomp"] == ["2"]  # SECCOMP_MODE_FILTER


@pytest.mark.parametrize(
    "denied",
    [seccomp_filter.MEMPOLICY_SETTERS, seccomp_filter.ALL_NUMA],
    ids=["setters", "docker-default"],
)
def test_default_keeps_cpus_and_warns_once(denied) -> None:
    result, stderr = _run(denied)
    binding = result["binding"]
    assert result["before"] == "0-1"
    assert result["after"] == "1" and binding["cpus"] == "1"  # CPU binding kept
    assert set(result["tasks"].values()) == {"1"}
    assert binding["partial"] is True
    assert binding["memory_applied"] is False
    assert [s["what"] for s in binding["skipped"]] == ["memory policy"]
    assert binding["skipped"][0]["errno"] == errno.EPERM
    warnings = [r for r in result["records"] if r[0] == "WARNING"]
    assert len(warnings) == 1, result["records"]
    message = warnings[0][2]
    assert "EPERM" in message
    assert "--cap-add SYS_NICE" in message and "seccomp profile" in message
    assert "CPU affinity was applied" in message
    infos = [r for r in result["records"] if r[0] == "INFO"]
    assert len(infos) == 1 and "(partial)" in infos[0][2]
    # What the binding claims (CPUs only) is in force.
    assert result["verify"]["ok"] is True
    # libnuma printed nothing; only our log records, captured in-process.
    assert stderr.strip() == ""


def test_raise_rolls_back_affinity_and_chains_the_cause() -> None:
    result, stderr = _run(seccomp_filter.ALL_NUMA, on_error="raise")
    assert "binding" not in result
    assert result["cause"] == "NumaSyscallError"
    assert result["cause_errno"] == errno.EPERM
    assert "EPERM" in result["error"] and "rolled back" in result["error"]
    assert result["after"] == "0-1"  # back to the original
    assert set(result["tasks"].values()) == {"0-1"}
    assert not [r for r in result["records"] if r[0] == "WARNING"]
    assert stderr.strip() == ""


def test_with_sys_nice_policy_applies_but_migration_and_page_check_are_denied() -> None:
    result, _ = _run(MIGRATION_ONLY, policy="BIND", migrate=True)
    binding = result["binding"]
    assert binding["memory_applied"] is True
    assert binding["policy_read_back"] == {"kernel_policy": "MPOL_BIND", "nodes": "0", "flags": 0}
    assert binding["partial"] is True
    assert [s["what"] for s in binding["skipped"]] == ["page migration"]
    assert binding["pages_not_moved"] is None and binding["migrated"] is False
    warnings = [r[2] for r in result["records"] if r[0] == "WARNING"]
    assert len(warnings) == 1 and "migrate_pages" in warnings[0]
    verify = result["verify"]
    # move_pages is denied: placement cannot be checked, which is a note, not a failure.
    assert verify["ok"] is True and verify["memory_checked"] is False
    assert any("page placement not checked" in n for n in verify["notes"])


def test_with_sys_nice_raise_on_migration_rolls_back_policy_too() -> None:
    result, _ = run_in_child(child_seccomp.raise_on_denied_migration)
    assert "page migration failed" in result["error"]
    assert result["policy"] == "MPOL_DEFAULT"
    assert result["after"] == "0-1"
