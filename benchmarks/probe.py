"""Measurements that need a fresh interpreter: ``python -m benchmarks.probe WHAT``.

``COLD_SOURCE`` is run with ``python -c`` rather than ``-m`` (runpy itself
loads importlib, contextlib and functools, which pynumabind would otherwise
pay for), so the cold figures include every module the first bind loads.
Prints one JSON object on stdout.

``python -m benchmarks.probe WHAT ...``:

* ``import``: ``import pynumabind`` once;
* ``warm RANK REPS EXTRA_THREADS``: ``apply_plan`` again and again vs the raw syscalls;
* ``rebind RANK REPS [EXTRA_THREADS]``: ``bind_current_process`` after the first, vs the
  raw syscalls, with ``EXTRA_THREADS`` idle threads alive beside the main one;
* ``sysfs ROOT REPS``: discovery of a sysfs tree, files only;
* ``scaling ROOT REPS NPROCS MODE...``: discovery + plan of a sysfs tree, per CPU mode.

Discovery goes through ``benchmarks.common`` (the one place naming the API).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

WATCHED_MODULES = ("pynvml", "numpy", "torch", "cffi", "_cffi_backend")
# What the cold program also reports as loaded: issue 14 wants ``import
# pynumabind`` to load none of pynvml, numpy and json, and the bind path to
# load only what it uses (the NVML and KFD modules, inspect via dataclasses).
COLD_WATCHED = (
    *WATCHED_MODULES,
    "json",
    "inspect",
    "dataclasses",
    "pynumabind._os.nvml",
    "pynumabind._os.kfd",
)

# Modules a worker may or may not have loaded before it imports pynumabind;
# the cold program says which were, so a "bare" figure can be checked bare.
STARTUP_WATCHED = ("typing", "re", "enum", "json", "dataclasses", "logging", "contextlib")

# First import, then the first bind_current_process(RANK): detect, plan, apply.
# Only builtin modules (time, sys) are loaded before the clock stops; run it
# with ``python -S`` (see benchmarks.common.bare_python) or site's .pth files
# may have loaded more.
COLD_SOURCE = """
PRELOAD
import sys
import time
before = sorted(m for m in STARTUP_TUPLE if m in sys.modules)
modules_before = len(sys.modules)
start = time.perf_counter()
import pynumabind
imported = time.perf_counter()
WATCHED = WATCHED_TUPLE
after_import = sorted(m for m in WATCHED if m in sys.modules)
begin = time.perf_counter()
bind = getattr(pynumabind, "bind_current_process", None)
entry = "pynumabind.bind_current_process"
if bind is None:
    from pynumabind import binding
    bind = binding.bind_current_process
    entry = "pynumabind.binding.bind_current_process (not exported)"
binding = bind(RANK)
bound = time.perf_counter()
# Again, now that the modules are loaded: detect, plan and apply all run anew
# (nothing is cached between calls), so this is the cold cost without imports.
binding.restore()
again = time.perf_counter()
binding = bind(RANK)
rebound = time.perf_counter()
import json
try:
    described = binding.to_dict()
    json.dumps(described)
except Exception:
    described = {"repr": repr(binding)[:400]}
print(json.dumps({
    "import_s": imported - start,
    "bind_s": bound - begin,
    "rebind_s": rebound - again,
    "entry": entry,
    "loaded_before_import": before,
    "module_count_before_import": modules_before,
    "modules_after_import": after_import,
    "modules_after_bind": sorted(m for m in WATCHED if m in sys.modules),
    "binding": described,
}))
"""


def _node0_cpus() -> frozenset:
    """Node 0's CPUs as the kernel lists them (empty when there is no node 0)."""
    from pynumabind.cpulist import parse_cpulist

    try:
        with open("/sys/devices/system/node/node0/cpulist", encoding="ascii") as handle:
            return parse_cpulist(handle.read().strip())
    except OSError:
        return frozenset()


def cold_source(rank: int, preload: Tuple[str, ...] = ()) -> str:
    """The ``python -c`` program of one cold measurement; ``preload``: modules imported first."""
    for name in preload:
        if not name.replace(".", "").replace("_", "").isalnum():
            raise ValueError(f"not a module name: {name!r}")
    return (
        COLD_SOURCE.replace("PRELOAD", "".join(f"import {name}\n" for name in preload))
        .replace("WATCHED_TUPLE", repr(COLD_WATCHED))
        .replace("STARTUP_TUPLE", repr(STARTUP_WATCHED))
        .replace("RANK", str(int(rank)))
    )


def loaded(names: Tuple[str, ...] = WATCHED_MODULES) -> List[str]:
    return sorted(n for n in names if n in sys.modules)


def bind_entry(pynumabind: Any) -> Tuple[Callable[..., Any], str]:
    """``pynumabind.bind_current_process``; the binder module's own while it is not exported."""
    public = getattr(pynumabind, "bind_current_process", None)
    if public is not None:
        return public, "pynumabind.bind_current_process"
    from pynumabind import binding

    return binding.bind_current_process, "pynumabind.binding.bind_current_process (not exported)"


def probe_import() -> Dict[str, Any]:
    start = time.perf_counter()
    import pynumabind  # noqa: F401

    return {"import_s": time.perf_counter() - start, "modules_after_import": loaded()}


# ------------------------------------------------------------------- warm


def _timed(reps: int, body: Callable[[], Any], undo: Callable[[Any], None]) -> List[float]:
    samples: List[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        token = body()
        samples.append((time.perf_counter() - start) * 1e6)
        undo(token)
    return samples


def raw_syscalls(
    cpus: frozenset[int], mems: frozenset[int], policy: str, original_cpus: frozenset[int]
) -> Tuple[Callable[[], None], Callable[[Any], None]]:
    """The floor any in-process binder has (see :mod:`benchmarks.rawbind`), and its undo."""
    from .rawbind import RawBinder

    binder = RawBinder(cpus, mems, policy, original_cpus)
    return binder.apply, binder.undo


def _idle_threads(count: int) -> Tuple[threading.Event, List[threading.Thread]]:
    """``count`` started threads that wait on the returned event (small stacks: 1,000 fit)."""
    stop = threading.Event()
    previous = threading.stack_size(256 * 1024)
    try:
        idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(count)]
        for thread in idle:
            thread.start()
    finally:
        threading.stack_size(previous)
    return stop, idle


def probe_warm(rank: int, reps: int, extra_threads: int) -> Dict[str, Any]:
    """``apply_plan(plan)`` again and again, against the raw syscalls it stands for.

    Raw = list this process's threads, ``sched_setaffinity`` each, then
    ``set_mempolicy`` once: the minimum any in-process binder must do.
    Both run with ``extra_threads`` idle threads alive, because binding
    every thread (not only the caller) is part of the job.
    """
    import pynumabind
    from pynumabind.cpulist import format_cpulist

    stop, _ = _idle_threads(extra_threads)
    out: Dict[str, Any] = {"threads": len(os.listdir("/proc/self/task")), "reps": reps}
    original_cpus = frozenset(os.sched_getaffinity(0))
    try:
        plan, apply_plan, out["plan_source"] = _plan_and_applier(pynumabind, rank)
    except Exception as exc:
        plan, apply_plan = None, None
        out["apply_unavailable"] = f"{type(exc).__name__}: {exc}"
    if plan is not None and apply_plan is not None:
        cpus = plan.cpus if plan.cpus is not None else original_cpus
        mems = frozenset(plan.mems)
        policy = str(getattr(plan.policy, "value", plan.policy))
        out["plan"] = plan.to_dict() if hasattr(plan, "to_dict") else repr(plan)
        out["apply_us"] = _timed(reps, lambda: apply_plan(plan), lambda b: b.restore())
    else:  # what a node-0 binding would be
        node0 = _node0_cpus() & original_cpus
        cpus, mems, policy = node0 or original_cpus, frozenset({0}), "bind"
    raw, raw_undo = raw_syscalls(cpus, mems, policy, original_cpus)
    out["raw"] = {"cpus": format_cpulist(cpus), "mems": format_cpulist(mems), "policy": policy}
    out["raw_us"] = _timed(reps, raw, raw_undo)
    stop.set()
    return out


def probe_rebind(rank: int, reps: int, extra_threads: int = 0) -> Dict[str, Any]:
    """``bind_current_process(rank)`` after the first call, against the raw syscalls.

    The first call (imports, first discovery) is not timed; each timed call
    follows a ``restore()`` of the previous binding, so it binds anew from
    the process's original state.  The raw floor binds the same CPUs and
    memory nodes in the same process, with the same ``extra_threads`` idle
    threads alive (both bind every thread).
    """
    import pynumabind
    from pynumabind.cpulist import format_cpulist

    stop, _ = _idle_threads(extra_threads)
    bind, entry = bind_entry(pynumabind)
    original_cpus = frozenset(os.sched_getaffinity(0))
    first = bind(rank)
    plan = first.plan
    first.restore()
    out: Dict[str, Any] = {
        "entry": entry,
        "threads": len(os.listdir("/proc/self/task")),
        "reps": reps,
    }
    out["second_bind_us"] = _timed(reps, lambda: bind(rank), lambda b: b.restore())
    cpus = plan.cpus if plan.cpus is not None else original_cpus
    mems = frozenset(plan.mems)
    policy = str(getattr(plan.policy, "value", plan.policy))
    raw, raw_undo = raw_syscalls(cpus, mems, policy, original_cpus)
    out["raw"] = {"cpus": format_cpulist(cpus), "mems": format_cpulist(mems), "policy": policy}
    out["raw_us"] = _timed(reps, raw, raw_undo)
    stop.set()
    return out


def probe_sysfs(root: str, reps: int) -> Dict[str, Any]:
    """Discovery of the sysfs tree at ``root`` (files only): the first call, then ``reps`` more."""
    from .common import read_topology

    start = time.perf_counter()
    topology = read_topology(root)
    first = time.perf_counter() - start
    samples: List[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        read_topology(root)
        samples.append((time.perf_counter() - start) * 1e3)
    return {
        "first_ms": first * 1e3,
        "samples_ms": samples,
        "cpus": len(topology.cpus),
        "nodes": len(topology.nodes),
        "gpus": len(topology.gpus),
    }


def probe_scaling(root: str, reps: int, nprocs: int, modes: List[str]) -> Dict[str, Any]:
    """``reps`` rounds over the CPU modes: discover the tree at ``root``, plan rank 0 of ``nprocs``.

    Discovery is ``detect`` without NVML (there is no GPU behind a fake
    tree) and with an empty environment (every GPU visible), reading the
    detail each mode needs, as the first bind does (``discovery.detail_for``;
    nothing kept between calls); the first discovery, which loads modules and
    reads in full, is reported apart and not in the samples.
    """
    from pynumabind import planner
    from pynumabind.cpulist import format_cpulist

    from .common import detect_topology, discovery_api

    detail_for = getattr(discovery_api(), "detail_for", None)

    def discover(mode: Optional[str] = None) -> Any:
        options: Dict[str, Any] = {}
        if mode is not None and detail_for is not None:
            options["detail"] = detail_for(mode)
        return detect_topology(sysfs_root=root, use_nvml=False, environ={}, **options)

    start = time.perf_counter()
    topology = discover()
    out: Dict[str, Any] = {
        "first_detect_ms": (time.perf_counter() - start) * 1e3,
        "cpus": len(topology.cpus),
        "nodes": len(topology.nodes),
        "gpus": len(topology.gpus),
        "nprocs": nprocs,
        "modes": {},
    }
    timings: Dict[str, Dict[str, List[float]]] = {m: {"detect": [], "plan": []} for m in modes}
    results: Dict[str, Any] = {}
    for _ in range(reps):  # modes round-robin, so a slow moment hits them all alike
        for mode in modes:
            start = time.perf_counter()
            topology = discover(mode)
            found = time.perf_counter()
            results[mode] = planner.plan(topology, 0, nprocs, mode=mode)
            done = time.perf_counter()
            timings[mode]["detect"].append((found - start) * 1e3)
            timings[mode]["plan"].append((done - found) * 1e3)
    for mode in modes:
        detect_ms, plan_ms = timings[mode]["detect"], timings[mode]["plan"]
        result = results.get(mode)
        out["modes"][mode] = {
            "detect_ms": detect_ms,
            "plan_ms": plan_ms,
            "total_ms": [d + p for d, p in zip(detect_ms, plan_ms)],
            "plan": None
            if result is None
            else {
                "cpus": None if result.cpus is None else format_cpulist(result.cpus),
                "cpu_count": None if result.cpus is None else len(result.cpus),
                "mems": format_cpulist(result.mems),
            },
        }
    return out


def _plan_and_applier(pynumabind: Any, rank: int) -> Tuple[Any, Callable[[Any], Any], str]:
    """A plan to re-apply, ``binding.apply_plan``, and where the plan came from.

    The plan is the one ``bind_current_process(rank)`` applies; if that call
    cannot run here (no discovery yet), a node-0 plan built by hand, the
    same one the raw syscalls get.
    """
    from pynumabind import binding as binding_module
    from pynumabind.model import MemoryPolicy, Plan

    try:
        binding = bind_entry(pynumabind)[0](rank)
    except Exception as exc:
        cpus = _node0_cpus() & frozenset(os.sched_getaffinity(0))
        plan = Plan(rank, None, cpus, frozenset({0}), MemoryPolicy.BIND, node=0)
        return plan, binding_module.apply_plan, f"node 0 by hand ({type(exc).__name__}: {exc})"
    applied: Any = getattr(binding, "plan", None)
    binding.restore()
    if applied is None:
        raise AttributeError("the Binding has no .plan to re-apply")
    return applied, binding_module.apply_plan, f"bind_current_process({rank})"


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    what = args[0]
    try:
        if what == "import":
            result = probe_import()
        elif what == "warm":
            result = probe_warm(int(args[1]), int(args[2]), int(args[3]))
        elif what == "rebind":
            result = probe_rebind(int(args[1]), int(args[2]), int(args[3]) if args[3:] else 0)
        elif what == "sysfs":
            result = probe_sysfs(args[1], int(args[2]))
        elif what == "scaling":
            result = probe_scaling(args[1], int(args[2]), int(args[3]), list(args[4:]))
        else:
            raise SystemExit(f"unknown probe {what!r}")
    except Exception as exc:  # reported as data: the suite goes on
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
