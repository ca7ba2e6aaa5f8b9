"""The measured process: apply one setup, run one kernel, print one JSON object.

Each measurement runs in a fresh interpreter (``python -m benchmarks.worker
SPEC``) so that a binding never leaks into the next setup and memory is
first touched under the policy being measured, exactly as in a freshly
spawned, freshly bound GPU worker.  The setup is applied with the same
syscalls binding makes -- ``sched_setaffinity`` and ``set_mempolicy`` --
before numpy (and its thread pools) or torch are imported, so every thread
created later inherits it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

from pynumabind import _libnuma

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
        "mempolicy": applied.mode_name,
        "mempolicy_nodes": sorted(applied.nodes),
    }


def page_placement(array: Any, max_pages: int = 4096) -> Dict[str, int]:
    """Which node each (sampled) page of ``array`` is on: proof of where memory really went."""
    view = memoryview(array).cast("B")
    page = os.sysconf("SC_PAGE_SIZE")
    stride = max(1, len(view) // page // max_pages) * page
    counts: Counter[str] = Counter()
    for offset in range(0, len(view) - page + 1, stride):
        (node,) = _libnuma.page_nodes(view[offset : offset + 1])
        counts[str(node) if node >= 0 else f"error{-node}"] += 1
    return dict(sorted(counts.items()))


def run_bandwidth(task: Dict[str, Any]) -> Dict[str, Any]:
    """Multi-threaded copy with numpy (its large copies run without the GIL)."""
    import numpy as np

    threads = int(task["threads"])
    nbytes = int(task["bytes"]) // (8 * threads) * (8 * threads)
    src = np.empty(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    src.fill(1.0)  # first touch, by this thread, under the policy being measured
    dst.fill(0.0)
    chunk = len(src) // threads
    samples: List[float] = []
    for rep in range(int(task["reps"]) + 1):  # the first pass is a warm-up
        barrier = threading.Barrier(threads + 1)

        def copy(part: int, barrier: threading.Barrier = barrier) -> None:
            lo, hi = part * chunk, (part + 1) * chunk
            barrier.wait()
            np.copyto(dst[lo:hi], src[lo:hi])

        workers = [threading.Thread(target=copy, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        barrier.wait()
        start = time.perf_counter()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - start
        if rep:
            samples.append(2 * nbytes / elapsed / 1e9)  # read + write, STREAM's convention
    if not bool(dst[-1] == 1.0):
        raise RuntimeError("copy did not complete")
    return {
        "samples": samples,
        "unit": "GB/s",
        "bytes": nbytes,
        "threads": threads,
        "placement": page_placement(src),
    }


def run_latency(task: Dict[str, Any]) -> Dict[str, Any]:
    """Pointer chase over a buffer larger than the L3 cache (dependent loads, in C)."""
    import numpy as np

    from .ckernels import load_kernels

    kernels, why = load_kernels(task.get("build_dir"))
    if kernels is None:
        return {"unavailable": why}
    lines = int(task["bytes"]) // 64
    buffer = np.empty(lines * 8, dtype=np.uint64)
    address = int(buffer.ctypes.data)
    kernels.chase_init(address, lines, seed=int(task.get("seed", 1)))
    steps = int(task["steps"])
    kernels.chase_run(address, min(steps, lines))  # warm the TLB/page tables once
    samples = [kernels.chase_run(address, steps) for _ in range(int(task["reps"]))]
    return {
        "samples": samples,
        "unit": "ns",
        "bytes": lines * 64,
        "steps": steps,
        "placement": page_placement(buffer),
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


def run_gpu(task: Dict[str, Any]) -> Dict[str, Any]:
    """Pinned host<->device copy bandwidth on one GPU."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    device = torch.device("cuda", int(task["gpu"]))
    nbytes = int(task["bytes"])
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)  # cudaHostAlloc, here
    host.fill_(1)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    out: Dict[str, Any] = {
        "bytes": nbytes,
        "unit": "GB/s",
        "placement": page_placement(host.numpy()),
    }
    event_type: Any = torch.cuda.Event  # untyped in torch's stubs
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device)
        copies: Tuple[Tuple[str, Callable[[], Any]], ...] = (
            ("h2d", lambda: dev.copy_(host, non_blocking=True)),
            ("d2h", lambda: host.copy_(dev, non_blocking=True)),
        )
        for name, copy in copies:
            copy()  # warm-up
            torch.cuda.synchronize(device)
            samples: List[float] = []
            for _ in range(int(task["reps"])):
                start = event_type(enable_timing=True)
                stop = event_type(enable_timing=True)
                start.record(stream)
                copy()
                stop.record(stream)
                stop.synchronize()
                samples.append(nbytes / (start.elapsed_time(stop) / 1e3) / 1e9)
            out[name] = samples
    return out


TASKS = {
    "bandwidth": run_bandwidth,
    "latency": run_latency,
    "spin": run_spin,
    "gpu": run_gpu,
}


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
