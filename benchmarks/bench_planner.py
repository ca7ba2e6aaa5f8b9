"""Cost of planning one rank when there are very many: time and peak traced memory.

``python -m benchmarks.bench_planner`` prints one JSON line per case.  The
planner promises that one rank's plan costs O(ranks sharing its node) in
strings and slicing (every rank is still placed, which is cheap), so
``LOCAL_WORLD_SIZE=65536`` -- the accepted maximum -- plans in well under a
second and without gigabytes.  The machine is a DGX H100 as the planner
sees it: 2 sockets of 56 cores with SMT, 8 GPUs, 4 per node.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from typing import Callable, List, Tuple

from pynumabind.model import Cpu, Gpu, NumaNode, Topology
from pynumabind.planner import plan, plan_all

MB = 1 << 20


def dgx_h100_like() -> Topology:
    cpus = {}
    for cpu in range(224):
        core = cpu % 112
        node = core // 56
        cpus[cpu] = Cpu(
            id=cpu,
            node=node,
            package=node,
            core=core,
            siblings=frozenset({core, core + 112}),
        )
    nodes = {
        n: NumaNode(
            id=n,
            cpus=frozenset(c for c, info in cpus.items() if info.node == n),
            distances={0: 10 if n == 0 else 21, 1: 21 if n == 0 else 10},
        )
        for n in (0, 1)
    }
    gpus = tuple(
        Gpu(index=i, pci_bus_id=f"0000:{0x18 + i:02X}:00.0", vendor="nvidia", numa_node=i // 4)
        for i in range(8)
    )
    return Topology(
        nodes=nodes,
        cpus=cpus,
        gpus=gpus,
        allowed_cpus=frozenset(cpus),
        allowed_mems=frozenset(nodes),
    )


TOPOLOGY = dgx_h100_like()

CASES: List[Tuple[str, Callable[[], object]]] = [
    (f"plan one rank, nprocs {n}, mode {mode}", lambda n=n, mode=mode: plan(TOPOLOGY, 0, n, mode))
    for n in (1024, 16384, 65536)
    for mode in ("node", "exclusive")
] + [
    ("plan_all, nprocs 16384, mode exclusive", lambda: plan_all(TOPOLOGY, 16384, "exclusive")),
]


def main() -> None:
    """Time each case, then run it again under tracemalloc for its peak memory."""
    for name, call in CASES:
        began = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - began
        tracemalloc.start()
        call()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        row = {"case": name, "seconds": round(seconds, 4), "peak_MiB": round(peak / MB, 1)}
        row["plans"] = len(result) if isinstance(result, list) else 1
        print(json.dumps(row))


if __name__ == "__main__":
    main()
