"""Worker functions for multiprocessing tests (importable by spawn/forkserver)."""

from __future__ import annotations

import os
from typing import Any, Dict


def bind_and_report(cpu: int, queue: Any) -> None:
    """Bind this worker to ``cpu`` and node 0, then report what the kernel says."""
    from pynumabind._os import libnuma as _libnuma
    from pynumabind.binding import apply_plan
    from pynumabind.model import MemoryPolicy, Plan

    report: Dict[str, Any] = {"pid": os.getpid()}
    try:
        plan = Plan(
            rank=cpu,
            gpu_info=None,
            cpus=frozenset({cpu}),
            mems=frozenset({0}),
            policy=MemoryPolicy.PREFERRED,
        )
        binding = apply_plan(plan, on_error="raise")
        with open("/proc/self/status") as handle:
            status = dict(line.rstrip("\n").split(":\t", 1) for line in handle if ":\t" in line)
        policy = _libnuma.get_mempolicy()
        report.update(
            cpus=status["Cpus_allowed_list"].strip(),
            policy=policy.kernel_policy,
            nodes=sorted(policy.nodes),
            verify_ok=binding.verify().ok,
        )
    except BaseException as exc:  # report, don't hang the parent
        report["error"] = repr(exc)
    queue.put(report)
