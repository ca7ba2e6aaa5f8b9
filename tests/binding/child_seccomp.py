"""Child bodies of binding/test_seccomp.py: bind under a real seccomp filter.

Each installs its filter first and imports pynumabind only afterwards (so
libnuma loads under the filter, as in a container): no pynumabind import at
module level here.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Tuple

from ..support import seccomp_filter
from ..support.childstate import cpus_allowed, task_cpus


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: List[Tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname, record.name, record.getMessage()))


def filter_denies() -> Dict[str, Any]:
    seccomp_filter.install(seccomp_filter.MEMPOLICY_SETTERS)
    with open("/proc/self/status") as status:
        seccomp = [line.split()[1] for line in status if line.startswith("Seccomp:")]
    return {
        "set_mempolicy": seccomp_filter.raw_syscall_errno(238, 0, 0, 0),
        "mbind": seccomp_filter.raw_syscall_errno(237, 0, 4096, 0, 0, 0, 0),
        "get_mempolicy": seccomp_filter.raw_syscall_errno(239, 0, 0, 0, 0, 0),
        "getpid_works": os.getpid() > 0,
        "seccomp": seccomp,
    }


def bind_under_filter(denied: str, on_error: str, policy: str, migrate: str) -> Dict[str, Any]:
    """Deny the syscalls ``denied`` (comma-separated numbers), then bind to CPU 1, node 0."""
    seccomp_filter.install(tuple(int(nr) for nr in denied.split(",")))
    keep = _Keep()
    logging.getLogger("pynumabind").addHandler(keep)
    logging.getLogger("pynumabind").setLevel(logging.INFO)
    from pynumabind.binding import apply_plan
    from pynumabind.errors import BindError
    from pynumabind.model import MemoryPolicy, Plan

    plan = Plan(
        rank=0,
        gpu_info=None,
        cpus=frozenset({1}),
        mems=frozenset({0}),
        policy=MemoryPolicy[policy],
    )
    assert migrate in ("True", "False"), migrate
    out: Dict[str, Any] = {"before": cpus_allowed()}
    try:
        binding = apply_plan(plan, on_error=on_error, migrate=migrate == "True")
    except BindError as exc:
        cause = exc.__cause__
        out.update(
            error=str(exc), cause=type(cause).__name__, cause_errno=getattr(cause, "errno", None)
        )
    else:
        out.update(binding=binding.to_dict(), verify=binding.verify().to_dict())
    out.update(after=cpus_allowed(), tasks=task_cpus(), records=keep.records)
    return out


def raise_on_denied_migration() -> Dict[str, Any]:
    seccomp_filter.install((256, 279))
    from pynumabind._os import libnuma as _libnuma
    from pynumabind.binding import apply_plan
    from pynumabind.errors import BindError
    from pynumabind.model import MemoryPolicy, Plan

    plan = Plan(
        rank=0, gpu_info=None, cpus=frozenset({1}), mems=frozenset({0}), policy=MemoryPolicy.BIND
    )
    try:
        apply_plan(plan, migrate=True, on_error="raise")
    except BindError as exc:
        err = str(exc)
    policy = _libnuma.get_mempolicy()
    return {"error": err, "policy": policy.kernel_policy, "after": cpus_allowed()}
