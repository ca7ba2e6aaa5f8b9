"""Fake sysfs trees to time discovery on machines this box is not.

The trees are written by the test suite's own generator
(``tests/support/sysfs_tree.py``: the files pynumabind reads, in the kernel's
formats), so discovery parses exactly what it parses in the tests.  Two kinds:

* a machine fixture from ``tests/machines/`` (the 224-CPU DGX H100 of issue 14);
* a generated machine of any CPU count (:func:`generated_machine`), for the
  scaling series.

``generated_machine`` is pure (a description dict out); only
:func:`build_tree` writes files.  The generator is loaded from the source
tree by path because ``tests/`` is not installed (and a ``tests`` package
elsewhere on the path must not stand in for it): the benchmarks run from a
checkout (``python -m benchmarks``, ``tox -e bench``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

__all__ = [
    "SCALING_CPUS",
    "build_tree",
    "count_files",
    "generated_machine",
    "machine_shape",
    "sysfs_tree_module",
]

SUPPORT_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support"
)

#: CPU counts of the scaling series (issue 14).
SCALING_CPUS: Tuple[int, ...] = (2, 64, 256, 1024, 4096)

#: CPUs -> (packages, NUMA nodes per package, SMT) for the scaling series:
#: this box; a small 2-socket server; an NPS2-like 2-socket server; and
#: NPS4-like 4- and 16-socket machines, 64 CPUs per node.
SHAPES: Dict[int, Tuple[int, int, bool]] = {
    2: (1, 1, False),
    64: (2, 1, True),
    256: (2, 2, True),
    1024: (4, 4, True),
    4096: (16, 4, True),
}

GPUS = 8  # a typical 8-GPU box; 1 on the 2-CPU machine
PCI_PER_NODE = 4  # non-GPU PCI functions (NICs, NVMe) per node, which discovery also scans
CORES_PER_L3 = 8  # cores sharing an L3 (an AMD CCX); core-complex mode splits along these
NODE_MEMORY_MB = 65536


def sysfs_tree_module() -> ModuleType:
    """``tests/support/sysfs_tree.py``, by path (``ImportError`` when the checkout lacks it)."""
    name = "_pynumabind_bench_sysfs_tree"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(SUPPORT_DIR, "sysfs_tree.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        raise ImportError(f"the sysfs tree generator is not here: {path} (run from a checkout)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def machine_shape(cpus: int) -> Tuple[int, int, bool]:
    """(packages, nodes per package, SMT) of a generated machine with ``cpus`` CPUs.

    The series' sizes have fixed shapes (:data:`SHAPES`); any other even
    count gets 64 CPUs per node, 4 nodes per package.
    """
    if cpus in SHAPES:
        return SHAPES[cpus]
    if cpus < 1:
        raise ValueError(f"a machine needs at least one CPU, not {cpus}")
    if cpus < 64:
        return 1, 1, cpus % 2 == 0 and cpus >= 4
    if cpus % 64:
        raise ValueError(f"{cpus} CPUs: use a multiple of 64 (64 CPUs per node)")
    nodes = cpus // 64
    per_package = min(4, nodes)
    return max(1, nodes // per_package), per_package, True


def _ranges(spans: List[Tuple[int, int]]) -> str:
    return ",".join(f"{a}-{b - 1}" if b - a > 1 else str(a) for a, b in spans if b > a)


def generated_machine(cpus: int) -> Dict[str, Any]:
    """A ``tests/support/sysfs_tree.py`` description of a machine with ``cpus`` CPUs.

    Node ``k`` holds a consecutive block of cores and their SMT siblings
    (``c + cpus/2``, DGX numbering); every node has memory; distances are 10
    (self), 12 (same package), 32 (other package); GPUs are spread evenly
    over the nodes in PCI order, with :data:`PCI_PER_NODE` other PCI
    functions per node beside them.
    """
    packages, per_package, smt = machine_shape(cpus)
    nodes = packages * per_package
    cores = cpus // 2 if smt else cpus
    if cores % nodes:
        raise ValueError(f"{cpus} CPUs do not split evenly over {nodes} nodes")
    per_node = cores // nodes
    node_list: List[Dict[str, Any]] = []
    for k in range(nodes):
        spans = [(k * per_node, (k + 1) * per_node)]
        if smt:
            spans.append((cores + k * per_node, cores + (k + 1) * per_node))
        node_list.append(
            {
                "id": k,
                "cpus": _ranges(spans),
                "package": k // per_package,
                "memory_mb": NODE_MEMORY_MB,
                "free_mb": NODE_MEMORY_MB // 2,
            }
        )
    matrix = [
        [10 if a == b else 12 if a // per_package == b // per_package else 32 for b in range(nodes)]
        for a in range(nodes)
    ]
    gpus = 1 if cpus < 64 else GPUS
    gpu_list = [
        {
            "bus_id": f"0000:{0x10 + 0x10 * i:02x}:00.0",
            "vendor": "0x10de",
            "device": "0x2330",
            "class": "0x030200",
            "model": "generated GPU",
            "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
            "numa_node": i * nodes // gpus,
        }
        for i in range(gpus)
    ]
    extra = [
        {
            "bus_id": f"{0x100 + n:04x}:{0x20 + j:02x}:00.0",
            "vendor": "0x15b3",
            "device": "0x1021",
            "class": "0x020700" if j % 2 == 0 else "0x010802",
            "numa_node": n,
        }
        for n in range(nodes)
        for j in range(PCI_PER_NODE)
    ]
    return {
        "name": f"generated_{cpus}",
        "provenance": ["SYNTHESIZED by benchmarks/trees.py for the scaling series"],
        "online_cpus": f"0-{cpus - 1}" if cpus > 1 else "0",
        "smt_offset": cores if smt else None,
        "l3": {"cores_per_group": CORES_PER_L3} if per_node >= CORES_PER_L3 else "package",
        "nodes": node_list,
        "distances": {"matrix": matrix},
        "gpus": gpu_list,
        "extra_pci": extra,
    }


def build_tree(machine: Any, root: str, module: Optional[ModuleType] = None) -> str:
    """Write the sysfs tree of ``machine`` (a fixture name or a description) under ``root``."""
    generator = module or sysfs_tree_module()
    generator.build_sysfs(machine, root)
    return root


def count_files(root: str) -> int:
    """Regular files in a tree (what discovery could read)."""
    return sum(len(files) for _, _, files in os.walk(root))
