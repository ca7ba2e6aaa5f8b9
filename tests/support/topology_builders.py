"""Hand-built and generated :class:`Topology` values for planner tests.

``make_topology`` turns a compact description (node -> cpulist, SMT layout,
packages, L3 group size, distances, GPUs, allowed sets) into a Topology.
The real machines below are encoded straight from the raw published outputs
in /work/shared/topologies (file named in each docstring); anything not in
those files is marked as assumed.  ``topologies()`` is a hypothesis strategy
for generated machines.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from hypothesis import strategies as st

from pynumabind.cpulist import parse_cpulist
from pynumabind.model import Cpu, Gpu, NumaNode, Topology

GiB = 1 << 30

DistanceFn = Callable[[int, int], Optional[int]]
L3Spec = Union[None, int, str]  # None: unknown; int: cores per group; "node"/"package"


def default_distance(a: int, b: int) -> int:
    return 10 if a == b else 20


def gpu(
    index: int,
    numa_node: Optional[int],
    *,
    bus: Optional[str] = None,
    local_cpus: Union[str, Iterable[int]] = "",
    memory_node: Optional[int] = None,
    source: str = "sysfs",
    vendor: str = "nvidia",
    model: Optional[str] = None,
) -> Gpu:
    cpus = parse_cpulist(local_cpus) if isinstance(local_cpus, str) else frozenset(local_cpus)
    return Gpu(
        index=index,
        pci_bus_id=bus or f"0000:{0x10 + index:02x}:00.0",
        vendor=vendor,
        numa_node=numa_node,
        local_cpus=cpus,
        uuid=f"GPU-{index:08x}",
        model=model,
        memory_node=memory_node,
        physical_index=index,
        source=source,
    )


def _sibling_sets(online: frozenset[int], smt_offset: Optional[int], smt_adjacent: bool):
    out: Dict[int, frozenset[int]] = {}
    for c in online:
        if smt_offset is not None:
            first = c if c < smt_offset else c - smt_offset
            sibs = frozenset({first, first + smt_offset}) & online
        elif smt_adjacent:
            first = c - (c % 2)
            sibs = frozenset({first, first + 1}) & online
        else:
            sibs = frozenset({c})
        out[c] = sibs
    return out


def _l3_groups(
    l3: L3Spec,
    node_cpus: Mapping[int, frozenset[int]],
    cpu_nodes: Sequence[int],
    package_of: Mapping[int, int],
    siblings: Mapping[int, frozenset[int]],
) -> Dict[int, frozenset[int]]:
    """CPU -> its L3 group: consecutive physical cores (by lowest thread id)."""
    l3_of: Dict[int, frozenset[int]] = {}
    if l3 is not None:
        scopes: List[frozenset[int]] = []
        if l3 == "package":
            for p in sorted(set(package_of.values())):
                scopes.append(
                    frozenset().union(*(node_cpus[n] for n in cpu_nodes if package_of[n] == p))
                )
        else:
            scopes = [node_cpus[n] for n in cpu_nodes]
        for scope in scopes:
            cores: List[frozenset[int]] = []
            seen: set = set()
            for c in sorted(scope):
                if c not in seen:
                    core = siblings[c] & scope
                    seen |= core
                    cores.append(core)
            size = len(cores) if isinstance(l3, str) else int(l3)
            for start in range(0, len(cores), size):
                group = frozenset().union(*cores[start : start + size])
                for c in group:
                    l3_of[c] = group
    return l3_of


def make_topology(
    nodes: Mapping[int, Union[str, Iterable[int]]],
    *,
    smt_offset: Optional[int] = None,
    smt_adjacent: bool = False,
    packages: Optional[Mapping[int, int]] = None,
    memoryless: Iterable[int] = (),
    l3: L3Spec = None,
    distance: Optional[DistanceFn] = default_distance,
    gpus: Sequence[Gpu] = (),
    allowed_cpus: Union[str, Iterable[int], None] = None,
    allowed_mems: Union[str, Iterable[int], None] = None,
) -> Topology:
    """A Topology from a compact description.

    ``nodes`` maps node id to its CPUs ("" for a CPU-less node).  SMT: the
    sibling of CPU ``c`` is ``c + smt_offset`` (DGX numbering) or ``c ^ 1``
    with ``smt_adjacent``.  ``packages`` maps node -> package (default: each
    CPU node its own package).  ``l3`` is the number of physical cores per L3
    group (consecutive cores of a node), "node" or "package", or None.
    ``distance=None`` leaves the SLIT empty.  Allowed sets default to all
    CPUs and all nodes with memory.
    """
    node_cpus = {
        n: parse_cpulist(v) if isinstance(v, str) else frozenset(v) for n, v in nodes.items()
    }
    no_memory = frozenset(memoryless)
    online = frozenset().union(*node_cpus.values()) if node_cpus else frozenset()
    siblings = _sibling_sets(online, smt_offset, smt_adjacent)
    cpu_nodes = sorted(n for n, c in node_cpus.items() if c)
    package_of = dict(packages) if packages is not None else {n: i for i, n in enumerate(cpu_nodes)}

    l3_of = _l3_groups(l3, node_cpus, cpu_nodes, package_of, siblings)

    node_values = {}
    for n, cpus in node_cpus.items():
        has_memory = n not in no_memory
        dist: Dict[int, int] = {}
        if distance is not None:
            for m in node_cpus:
                d = distance(n, m)
                if d is not None:
                    dist[m] = d
        node_values[n] = NumaNode(
            id=n,
            cpus=cpus,
            memory_total=64 * GiB if has_memory else 0,
            memory_free=60 * GiB if has_memory else 0,
            has_memory=has_memory,
            distances=dist,
        )
    cpu_values = {}
    for n, cpus in node_cpus.items():
        for c in cpus:
            cpu_values[c] = Cpu(
                id=c,
                node=n,
                package=package_of.get(n, 0),
                core=min(siblings[c]),
                die=package_of.get(n, 0),
                siblings=siblings[c],
                l3=l3_of.get(c, frozenset()),
            )
    if allowed_cpus is None:
        allowed_c = online
    elif isinstance(allowed_cpus, str):
        allowed_c = parse_cpulist(allowed_cpus)
    else:
        allowed_c = frozenset(allowed_cpus)
    if allowed_mems is None:
        allowed_m = frozenset(n for n in node_cpus if n not in no_memory)
    elif isinstance(allowed_mems, str):
        allowed_m = parse_cpulist(allowed_mems)
    else:
        allowed_m = frozenset(allowed_mems)
    return Topology(
        nodes=node_values,
        cpus=cpu_values,
        gpus=tuple(gpus),
        allowed_cpus=allowed_c,
        allowed_mems=allowed_m,
    )


# ------------------------------------------------------------ real machines


def dgx_h100(**overrides: object) -> Topology:
    """DGX H100 (dgx_h100_vllm13855.txt).

    2x Xeon 8480C, 56 cores/socket, SMT sibling of N is N+112; node 0 =
    0-55,112-167, node 1 = 56-111,168-223; GPUs 0-3 on node 0, 4-7 on node 1
    (nvidia-smi "NUMA Affinity"); bus ids from the HGX H100 nvidia-smi dump in
    the same file.  Assumed: SLIT 10/21 (file: "standard 2-socket SPR"), one
    L3 per socket (Sapphire Rapids).
    """
    buses = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    gpus = [
        gpu(i, 0 if i < 4 else 1, bus=f"0000:{b}:00.0", model="NVIDIA H100 80GB HBM3")
        for i, b in enumerate(buses)
    ]
    spec: Dict[str, object] = dict(
        nodes={0: "0-55,112-167", 1: "56-111,168-223"},
        smt_offset=112,
        packages={0: 0, 1: 1},
        l3="package",
        distance=lambda a, b: 10 if a == b else 21,
        gpus=gpus,
    )
    spec.update(overrides)
    return make_topology(**spec)  # type: ignore[arg-type]


def _nps4_distance(a: int, b: int) -> int:
    if a == b:
        return 10
    return 12 if a // 4 == b // 4 else 32


def dgx_a100_nps4(**overrides: object) -> Topology:
    """DGX A100 in NPS4 (dgx_a100_nps4.txt).

    2x EPYC 7742, 8 nodes of 16 cores, node k = 16k..16k+15 plus SMT
    siblings +128.  GPU->node: 0,1 -> 3; 2,3 -> 1; 4,5 -> 7; 6,7 -> 5 (6,7
    inferred in the file).  GPU0 bus 0000:07:00.0 is from the NCCL dump; the
    other bus ids are assumed (DGX A100 layout).  Distances 10/12/32 as on
    the same CPU numbering in the MI210 file.  L3: a Zen 2 CCX = 4 cores.
    """
    nodes = {k: f"{16 * k}-{16 * k + 15},{128 + 16 * k}-{128 + 16 * k + 15}" for k in range(8)}
    buses = ["07", "0F", "47", "4E", "87", "90", "B7", "BD"]
    gpu_nodes = [3, 3, 1, 1, 7, 7, 5, 5]
    gpus = [
        gpu(i, n, bus=f"0000:{b}:00.0", model="NVIDIA A100-SXM4-40GB")
        for i, (b, n) in enumerate(zip(buses, gpu_nodes))
    ]
    spec: Dict[str, object] = dict(
        nodes=nodes,
        smt_offset=128,
        packages={k: k // 4 for k in range(8)},
        l3=4,
        distance=_nps4_distance,
        gpus=gpus,
    )
    spec.update(overrides)
    return make_topology(**spec)  # type: ignore[arg-type]


GB200_GPU_NODES = (2, 10, 18, 26)


def _gb200_distance(a: int, b: int) -> int:
    """Assumed from the GH200 quad SLIT (GB200's was not published)."""
    if a == b:
        return 10
    cpu = {0, 1}
    if a in cpu and b in cpu:
        return 40
    if a in cpu or b in cpu:
        gpu_node, cpu_node = (b, a) if a in cpu else (a, b)
        own = 0 if gpu_node < 18 else 1
        return 80 if cpu_node == own else 120
    return 255


def gb200_tray(*, with_affinity: bool = True, **overrides: object) -> Topology:
    """GB200 4-GPU compute tray, non-CDMM (gb200_nvl_compute_tray.txt).

    Nodes 0 (Grace 0: CPUs 0-71) and 1 (Grace 1: 72-143), no SMT; nodes
    2-33 CPU-less: 2, 10, 18, 26 are the GPUs' HBM (with memory), the rest
    empty MIG placeholders (no memory).  NVML reports numa_node = the HBM
    node; CPU affinity 0-71 for GPUs 0,1 and 72-143 for GPUs 2,3.  Assumed:
    the GH200-style SLIT (own Grace 80, other 120), one L3 per Grace, bus
    ids.  ``with_affinity=False`` drops the NVML CPU affinity so the
    planner must fall back on distances.
    """
    nodes: Dict[int, str] = {0: "0-71", 1: "72-143"}
    for n in range(2, 34):
        nodes[n] = ""
    memoryless = [n for n in range(2, 34) if n not in GB200_GPU_NODES]
    buses = ["0008:06:00.0", "0009:06:00.0", "0018:06:00.0", "0019:06:00.0"]
    gpus = [
        gpu(
            i,
            GB200_GPU_NODES[i],
            bus=buses[i],
            local_cpus=("0-71" if i < 2 else "72-143") if with_affinity else "",
            memory_node=GB200_GPU_NODES[i],
            source="nvml",
            model="NVIDIA GB200",
        )
        for i in range(4)
    ]
    spec: Dict[str, object] = dict(
        nodes=nodes,
        packages={0: 0, 1: 1},
        memoryless=memoryless,
        l3="package",
        distance=_gb200_distance,
        gpus=gpus,
    )
    spec.update(overrides)
    return make_topology(**spec)  # type: ignore[arg-type]


GH200_GPU_NODES = (4, 12, 20, 28)


def _gh200_quad_distance(a: int, b: int) -> int:
    """The numactl -H matrix of numactl issue #224: 10/40/80/120/255."""
    if a == b:
        return 10
    if a < 4 and b < 4:
        return 40
    if a < 4 or b < 4:
        cpu_node, gpu_node = (a, b) if a < 4 else (b, a)
        return 80 if (gpu_node - 4) // 8 == cpu_node else 120
    return 255


def gh200_quad(**overrides: object) -> Topology:
    """4x GH200 node (gh200_grace_hopper.txt, part B).

    Grace nodes 0-3 with 72 cores each (no SMT): 0-71, 72-143, 144-215,
    216-287 (DeltaAI table and "4 sockets x 72 cores").  GPU k's HBM is node
    4+8k (NVML "GPU NUMA ID" 4, 12, ...), the 7 nodes after it empty MIG
    placeholders.  SLIT verbatim from the numactl -H matrix.  No CPU
    affinity is given to the GPUs, so the planner must use the distances.
    """
    nodes: Dict[int, str] = {k: f"{72 * k}-{72 * k + 71}" for k in range(4)}
    for n in range(4, 36):
        nodes[n] = ""
    gpus = [
        gpu(
            k,
            GH200_GPU_NODES[k],
            bus=f"{k:04x}:01:00.0",
            memory_node=GH200_GPU_NODES[k],
            source="nvml",
            model="NVIDIA GH200 120GB",
        )
        for k in range(4)
    ]
    spec: Dict[str, object] = dict(
        nodes=nodes,
        packages={k: k for k in range(4)},
        memoryless=[n for n in range(4, 36) if n not in GH200_GPU_NODES],
        l3="package",
        distance=_gh200_quad_distance,
        gpus=gpus,
    )
    spec.update(overrides)
    return make_topology(**spec)  # type: ignore[arg-type]


def mi300x_unknown_gpu_node(*, affinity_for_unknown: str = "", **overrides: object) -> Topology:
    """8x MI300X on 2x Sapphire Rapids (mi300x_8gpu_2x_spr_rccl_topo.txt).

    Decoded RCCL masks: node 0 = 0-55,112-167, node 1 = 56-111,168-223;
    GPUs 0c,15,1e,69 on node 0 and 9f,af,bf,df on node 1.  The file also
    records the amd-smi "AFFINITY NONE" case (numa_node -1); which GPU of an
    MI300X box shows it is not published, so GPU 3 carries it here
    (constructed variant), source "kfd".
    """
    buses = ["0c", "15", "1e", "69", "9f", "af", "bf", "df"]
    gpus = []
    for i, b in enumerate(buses):
        if i == 3:
            gpus.append(
                gpu(
                    i,
                    None,
                    bus=f"0000:{b}:00.0",
                    vendor="amd",
                    source="kfd",
                    local_cpus=affinity_for_unknown,
                    model="AMD Instinct MI300X",
                )
            )
        else:
            gpus.append(
                gpu(
                    i,
                    0 if i < 4 else 1,
                    bus=f"0000:{b}:00.0",
                    vendor="amd",
                    source="kfd",
                    model="AMD Instinct MI300X",
                )
            )
    spec: Dict[str, object] = dict(
        nodes={0: "0-55,112-167", 1: "56-111,168-223"},
        smt_offset=112,
        packages={0: 0, 1: 1},
        l3="package",
        distance=lambda a, b: 10 if a == b else 21,
        gpus=gpus,
    )
    spec.update(overrides)
    return make_topology(**spec)  # type: ignore[arg-type]


def threadripper_memoryless(**overrides: object) -> Topology:
    """Threadripper 3960X NPS4 with memory-less CPU nodes 0 and 3, no GPU.

    From workstation_and_single_socket.txt (F), numactl -H verbatim: 24
    cores + SMT (sibling N+24), node k = 6k..6k+5 and 24+6k..; nodes 0 and 3
    have 0 MB; SLIT 10/12.  Assumed: Zen 2 CCX = 3 cores on the 3960X.
    """
    spec: Dict[str, object] = dict(
        nodes={k: f"{6 * k}-{6 * k + 5},{24 + 6 * k}-{24 + 6 * k + 5}" for k in range(4)},
        smt_offset=24,
        packages={k: 0 for k in range(4)},
        memoryless=[0, 3],
        l3=3,
        distance=lambda a, b: 10 if a == b else 12,
    )
    spec.update(overrides)
    return make_topology(**spec)  # type: ignore[arg-type]


# --------------------------------------------------------- hypothesis


def _draw_gpu(
    draw: st.DrawFn,
    index: int,
    *,
    cpu_node_ids: Sequence[int],
    memory_only: Sequence[int],
    node_cpus: Mapping[int, Sequence[int]],
    online: Sequence[int],
) -> Gpu:
    """One generated GPU: its node (CPU, memory-only, unknown or bogus) and its affinity."""
    where = draw(st.sampled_from(["cpu", "cpu", "memory", "unknown", "bogus"]))
    numa: Optional[int]
    if where == "cpu":
        numa = draw(st.sampled_from(cpu_node_ids))
    elif where == "memory" and memory_only:
        numa = draw(st.sampled_from(memory_only))
    elif where == "bogus":
        numa = 99
    else:
        numa = None
    affinity = draw(st.sampled_from(["none", "node", "random"]) if online else st.just("none"))
    if affinity == "node":
        local = frozenset(node_cpus[draw(st.sampled_from(cpu_node_ids))])
    elif affinity == "random":
        local = frozenset(draw(st.sets(st.sampled_from(online), min_size=1)))
    else:
        local = frozenset()
    mem_node = numa if numa is not None and numa in memory_only else None
    return gpu(
        index,
        numa,
        local_cpus=local,
        memory_node=mem_node,
        source=draw(st.sampled_from(["sysfs", "nvml", "kfd"])),
    )


@st.composite
def topologies(draw: st.DrawFn, max_nodes: int = 8, max_gpus: int = 8) -> Topology:
    """Generated machines.

    1-``max_nodes`` nodes with sparse ids, each a CPU node (with or without
    memory) or a memory-only node; SMT off, N+k or adjacent numbering; one or
    two packages; L3 groups of 1-4 cores or unknown; SLIT random, or absent;
    GPUs on CPU nodes, memory-only nodes, unknown or bogus nodes, with or
    without CPU affinity; allowed CPUs and mems possibly restricted.
    """
    count = draw(st.integers(1, max_nodes))
    ids = sorted(draw(st.sets(st.integers(0, 40), min_size=count, max_size=count)))
    kinds = draw(
        st.lists(
            st.sampled_from(["cpu", "cpu", "cpu", "memoryless", "memory_only"]),
            min_size=count,
            max_size=count,
        )
    )
    if all(k == "memory_only" for k in kinds):
        kinds[0] = "cpu"
    if not any(k in ("cpu", "memory_only") for k in kinds):
        kinds[0] = "cpu"
    cpu_node_ids = [n for n, k in zip(ids, kinds) if k != "memory_only"]
    cores_per_node = {n: draw(st.integers(1, 6)) for n in cpu_node_ids}
    smt = draw(st.sampled_from(["off", "offset", "adjacent"]))
    total_cores = sum(cores_per_node.values())
    node_cpus: Dict[int, List[int]] = {n: [] for n in ids}
    next_core = 0
    for n in cpu_node_ids:
        for _ in range(cores_per_node[n]):
            if smt == "adjacent":
                node_cpus[n] += [2 * next_core, 2 * next_core + 1]
            elif smt == "offset":
                node_cpus[n] += [next_core, next_core + total_cores]
            else:
                node_cpus[n].append(next_core)
            next_core += 1
    two_packages = draw(st.booleans()) and len(cpu_node_ids) > 1
    half = (len(cpu_node_ids) + 1) // 2
    packages = {n: (i >= half if two_packages else 0) for i, n in enumerate(cpu_node_ids)}
    packages = {n: int(p) for n, p in packages.items()}
    l3 = draw(st.sampled_from([None, 1, 2, 3, 4, "node"]))

    distance: Optional[DistanceFn]
    if draw(st.booleans()):
        table: Dict[tuple, int] = {}
        for i, a in enumerate(ids):
            for b in ids[i + 1 :]:
                value = draw(st.integers(11, 255))
                table[(a, b)] = table[(b, a)] = value

        def distance(a: int, b: int) -> Optional[int]:
            return 10 if a == b else table[(a, b)]

    else:
        distance = None

    memoryless = [n for n, k in zip(ids, kinds) if k == "memoryless"]
    online = sorted(c for cs in node_cpus.values() for c in cs)
    memory_nodes = [n for n in ids if n not in memoryless]

    gpu_count = draw(st.integers(0, max_gpus))
    memory_only = [n for n, k in zip(ids, kinds) if k == "memory_only"]
    gpu_list = [
        _draw_gpu(
            draw,
            index,
            cpu_node_ids=cpu_node_ids,
            memory_only=memory_only,
            node_cpus=node_cpus,
            online=online,
        )
        for index in range(gpu_count)
    ]

    if draw(st.booleans()):
        allowed_cpus = frozenset(draw(st.sets(st.sampled_from(online), min_size=1)))
    else:
        allowed_cpus = frozenset(online)
    if memory_nodes and draw(st.booleans()):
        allowed_mems = frozenset(draw(st.sets(st.sampled_from(memory_nodes), min_size=1)))
    else:
        allowed_mems = frozenset(memory_nodes)

    return make_topology(
        {n: node_cpus[n] for n in ids},
        smt_offset=total_cores if smt == "offset" else None,
        smt_adjacent=smt == "adjacent",
        packages=packages,
        memoryless=memoryless,
        l3=l3,
        distance=distance,
        gpus=gpu_list,
        allowed_cpus=allowed_cpus,
        allowed_mems=allowed_mems,
    )
