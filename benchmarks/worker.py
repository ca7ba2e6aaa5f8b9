"""The measured process (jitter): apply one setup, run one kernel, print one JSON object.

Each measurement runs in a fresh interpreter (``python -m benchmarks.worker
SPEC``) so that a binding never leaks into the next setup and memory is
first touched under the policy being measured, exactly as in a freshly
spawned, freshly bound GPU worker.  The setup is applied with the same
syscalls binding makes -- ``sched_setaffinity`` and ``set_mempolicy`` --
before anything else is imported, so every thread created later inherits
it.  Memory bandwidth, latency and GPU copies are measured by the library
itself (``pynumabind.advise``, the ``advise`` suite), not here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

from pynumabind._os import libnuma as _libnuma

POLICIES = {
    "bind": _libnuma.MPOL_BIND,
    "interleave": _libnuma.MPOL_INTERLEAVE,
    "preferred": _libnuma.MPOL_PREFERRED,
}


def apply_setup(setup: Dict[str, Any]) -> Dict[str, Any]:
    """Pin this (still single-threaded) process as ``setup`` says; report what the kernel says."""
    cpus = setup.get("cpus")
    if cpus is not None:
        os.sched_setaffinity(0, set(cpus))
    policy = setup.get("policy")
    if policy is not None:
        _libnuma.set_mempolicy(POLICIES[policy], frozenset(setup["mems"]))
    applied = _libnuma.get_mempolicy()
    return {
        "affinity": sorted(os.sched_getaffinity(0)),
        "mempolicy": applied.kernel_policy,
        "mempolicy_nodes": sorted(applied.nodes),
    }


def run_spin(task: Dict[str, Any]) -> Dict[str, Any]:
    """A CPU-bound loop of fixed work, timed per iteration."""
    from .ckernels import load_kernels

    iterations = int(task["iterations"])
    work = int(task["work"])
    kernels, why = load_kernels(task.get("build_dir"))
    if kernels is not None:
        kernels.spin(max(1, iterations // 10), work)  # warm-up
        ns, cpus = kernels.spin(iterations, work)
        return {"samples": [v / 1e3 for v in ns], "unit": "us", "cpus": cpus, "kernel": "C"}
    # Without a compiler: a Python loop; its jitter includes the interpreter's.
    samples: List[float] = []
    cpus_seen: List[int] = []
    scaled = max(1, work // 50)
    for _ in range(iterations):
        start = time.perf_counter_ns()
        x = 1
        for _ in range(scaled):
            x = (x * 6364136223846793005 + 1) & 0xFFFFFFFFFFFFFFFF
        samples.append((time.perf_counter_ns() - start) / 1e3)
        cpus_seen.append(-1)
    return {"samples": samples, "unit": "us", "cpus": cpus_seen, "kernel": f"python ({why})"}


TASKS = {"spin": run_spin}


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(args[0])
    result: Dict[str, Any] = {"setup": spec["setup"]}
    try:
        result["applied"] = apply_setup(spec["setup"])
        result.update(TASKS[spec["task"]["kind"]](spec["task"]))
    except Exception as exc:  # reported, not raised: one failing setup must not end the suite
        result["error"] = f"{type(exc).__name__}: {exc}"
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
