"""Apply time against the number of threads: ``apply_plan`` vs the raw floor.

A worker binds every thread it has (a torch worker has dozens; a data
loader can have hundreds), so applying a plan costs per thread.  For 1, 10,
100 and 1,000 threads alive (idle, small stacks), a fresh process times
``binding.apply_plan(plan)`` (the plan ``bind_current_process(0)`` made) and
the raw syscalls of :mod:`benchmarks.rawbind` (``sched_setaffinity`` on every
thread + one ``set_mempolicy``) with the same CPUs and nodes, and the ratio.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Sequence

from .common import Settings, say, worker_env
from .overhead import _run_json
from .stats import ratio, summarize

__all__ = ["run_threads"]


def run_threads(settings: Settings, *, counts: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """The series; ``counts`` overrides ``settings.thread_counts``."""
    runs: List[Dict[str, Any]] = []
    for threads in tuple(settings.thread_counts if counts is None else counts):
        reps = settings.thread_reps(threads)
        say(f"  threads: {threads} thread(s), {reps} applies")
        argv = [sys.executable, "-m", "benchmarks.probe", "warm", "0", str(reps), str(threads - 1)]
        result = _run_json(argv, worker_env(), timeout=600)
        entry: Dict[str, Any] = {"requested": threads, "reps": reps}
        if "error" in result:
            entry["error"] = result["error"]
            runs.append(entry)
            continue
        entry["threads"] = result["threads"]
        entry["plan_source"] = result.get("plan_source")
        entry["raw_binding"] = result.get("raw")
        raw = summarize(result["raw_us"], "us")
        entry["raw"] = raw.to_dict()
        if "apply_us" in result:
            apply = summarize(result["apply_us"], "us")
            entry["apply"] = apply.to_dict()
            entry["ratio"] = ratio("apply_plan", apply, "raw syscalls", raw).to_dict()
        else:
            entry["error"] = "apply_plan unavailable: " + str(result.get("apply_unavailable"))
        runs.append(entry)
    return {"runs": runs}
