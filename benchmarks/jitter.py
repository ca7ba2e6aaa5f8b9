"""Jitter: spread of a CPU-bound loop's iteration times, bound vs unbound, idle vs under load.

The load is one busy process per *other* CPU, each pinned there and each
ending on its own after a deadline (so a crashed suite never leaves load
behind).  The bound worker owns one CPU, as an exclusive-mode rank would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from .common import Settings, Setup, run_worker, say
from .machine import read_nodes
from .stats import ratio, summarize

__all__ = ["count_migrations", "run_jitter"]

LOAD_CODE = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
    "end = time.monotonic() + float(sys.argv[2])\n"
    "x = 0\n"
    "while time.monotonic() < end:\n"
    "    for _ in range(10000):\n"
    "        x = (x * 6364136223846793005 + 1) & 0xFFFFFFFFFFFFFFFF\n"
)


def count_migrations(cpus: List[int]) -> int:
    """How often consecutive iterations ended on different CPUs (unknown CPUs: -1, ignored)."""
    known = [c for c in cpus if c >= 0]
    return sum(1 for a, b in zip(known, known[1:]) if a != b)


def start_load(cpus: List[int], seconds: float) -> List[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", LOAD_CODE, str(cpu), f"{seconds:.1f}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for cpu in cpus
    ]


def stop_load(processes: List[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _reduce(result: Dict[str, Any]) -> Dict[str, Any]:
    if "error" in result:
        return {"error": result["error"]}
    summary = summarize(result["samples"], result["unit"], tail=True)
    cpus: List[int] = result["cpus"]
    return {
        "summary": summary.to_dict(),
        "cv": summary.stdev / summary.mean if summary.mean else None,
        "migrations": count_migrations(cpus),
        "cpus_used": sorted({c for c in cpus if c >= 0}),
        "kernel": result.get("kernel"),
        "applied": result.get("applied"),
        "samples": [round(v, 2) for v in result["samples"]],
    }


def run_jitter(settings: Settings) -> Dict[str, Any]:
    allowed = sorted(os.sched_getaffinity(0))
    worker_cpu = allowed[-1]
    load_cpus = [c for c in allowed if c != worker_cpu]
    node: Optional[int] = next((n.id for n in read_nodes() if worker_cpu in n.cpus), None)
    bound = Setup(
        name=f"bound: cpu {worker_cpu}" + ("" if node is None else f", memory node {node}"),
        cpus=frozenset({worker_cpu}),
        policy=None if node is None else "bind",
        mems=frozenset() if node is None else frozenset({node}),
        cpu_node=node,
        mem_node=node,
    )
    unbound = Setup(name="unbound")
    task = {
        "kind": "spin",
        "iterations": settings.jitter_iterations,
        "work": settings.jitter_work,
        "build_dir": settings.build_dir,
    }
    out: Dict[str, Any] = {
        "worker_cpu": worker_cpu,
        "load_cpus": load_cpus,
        "load": "one busy Python process pinned to each other allowed CPU",
        "iterations": settings.jitter_iterations,
        "work_per_iteration": settings.jitter_work,
        "runs": [],
    }
    if not load_cpus:
        out["note"] = "only one allowed CPU: there are no other CPUs to load"
    budget = 60.0 if settings.quick else 240.0  # the load's own deadline, far past the runs
    for loaded in (False, True):
        for setup in (unbound, bound):
            if loaded and not load_cpus:
                continue
            label = f"{'under load' if loaded else 'idle'}, {setup.name}"
            say(f"  jitter: {label}")
            processes = start_load(load_cpus, budget) if loaded else []
            try:
                if processes:
                    time.sleep(0.3)  # let the load reach its loop
                result = run_worker(setup, task, timeout=budget)
            finally:
                stop_load(processes)
            out["runs"].append(
                {
                    "name": label,
                    "loaded": loaded,
                    "bound": setup.cpus is not None,
                    **_reduce(result),
                }
            )
    out["ratios"] = jitter_ratios(out["runs"])
    return out


def jitter_ratios(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Unbound vs bound, per load condition: iteration time and its p99."""
    from .stats import Summary

    ratios: List[Dict[str, Any]] = []
    for loaded in (False, True):
        pair = {r["bound"]: r for r in runs if r["loaded"] == loaded and "summary" in r}
        if True not in pair or False not in pair:
            continue
        a = Summary.from_dict(pair[False]["summary"])
        b = Summary.from_dict(pair[True]["summary"])
        r = ratio(pair[False]["name"], a, pair[True]["name"], b)
        entry = {"metric": "iteration time", **r.to_dict()}
        if a.p99 and b.p99:
            entry["p99_ratio"] = a.p99 / b.p99
        ratios.append(entry)
    return ratios
