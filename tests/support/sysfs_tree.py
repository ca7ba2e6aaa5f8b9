"""Expand a machine description into a fake sysfs tree, in the kernel's formats.

The descriptions live in ``tests/machines/<name>.json``; each is a compact,
human-checkable record of one real (or, where its ``provenance`` says so,
partly inferred or synthetic) machine.  The generator writes exactly the
files pynumabind reads, byte-for-byte in the format the kernel prints them,
so ``topology_from_sysfs(tree)`` exercises the real parser.

Description format (JSON object)::

    name          str   machine id (file stem)
    provenance    [str] where each fact came from; INFERRED / SYNTHESIZED marks
    online_cpus   str   cpulist of online CPUs; node CPUs outside it are offline
    smt_offset    int|null  SMT sibling of CPU c is c+offset (c < offset); null: no SMT
    l3            "package" | "node" | {"cores_per_group": N} | null (no cache info)
    numa_sysfs    bool  false: kernel without NUMA (no devices/system/node) [true]
    die_id        bool  false: no topology/die_id files [true]
    nodes         [{id, cpus (cpulist, may be ""), package (CPU nodes),
                    memory_mb (0: memory-less; null: no meminfo), free_mb}]
    distances     {"matrix": rows in ascending node id order}
                  | {"self": 10, "default": D, "rules": [{"from": nodelist,
                     "to": nodelist, "value": d}, ...]}  (symmetric; later rules win)
    gpus          [{bus_id, vendor "0x10de", device, class "0x030200", model, uuid,
                    numa_node (PCI sysfs; -1 = unknown), local_cpulist (optional;
                    default: the node's online CPUs, all online CPUs for -1),
                    nvml: {cpu_affinity, memory_affinity, numa_node_id|null,
                           no_permission (optional: a device cgroup denies it)},
                    kfd: {unique_id, name}}]      -- listed in driver (NVML/KFD) order
    extra_pci     [{bus_id, vendor, device, class, numa_node}]  non-GPU functions
    kfd           bool  write the AMD KFD topology (CPU nodes first, then gpus)
    highest_perf  {"default": N, "cpus": {cpulist: N}}  ACPI CPPC highest_perf per online
                  CPU (cpuN/acpi_cppc/highest_perf); absent: no acpi_cppc/ (most VMs)
    allowed_cpus  str   the process's CPUs, when restricted (cgroup/affinity)
    allowed_mems  str   the process's memory nodes, when restricted
    expect        {gpu_numa_nodes: [...], gpu_memory_nodes: [...]}  ground truth
                  from the source, per GPU in driver order

API::

    machine_names() -> list of description names
    load_machine(name) -> dict
    build_sysfs(desc_or_name, root) -> root   (root: an empty directory)
    node_distances(desc) -> {a: {b: d}}        expanded SLIT
    cpu_facts(desc) -> {cpu: CpuFacts}         package/core/siblings/l3 per online CPU
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Union

from pynumabind.cpulist import format_cpulist, format_cpumask, parse_cpulist

MACHINES_DIR = Path(__file__).resolve().parents[1] / "machines"

Description = Dict[str, Any]


def machine_names() -> List[str]:
    return sorted(p.stem for p in MACHINES_DIR.glob("*.json"))


def load_machine(name: str) -> Description:
    with open(MACHINES_DIR / f"{name}.json", encoding="utf-8") as handle:
        data: Description = json.load(handle)
    return data


def _resolve(desc_or_name: Union[str, Description]) -> Description:
    if isinstance(desc_or_name, str):
        return load_machine(desc_or_name)
    return copy.deepcopy(desc_or_name)


# ----------------------------------------------------------- expansions


def online_cpus(desc: Description) -> frozenset[int]:
    return parse_cpulist(desc["online_cpus"])


def node_distances(desc: Description) -> Dict[int, Dict[int, int]]:
    ids = sorted(n["id"] for n in desc["nodes"])
    spec = desc["distances"]
    if "matrix" in spec:
        rows = spec["matrix"]
        assert len(rows) == len(ids), "distance matrix must have one row per node"
        return {a: dict(zip(ids, rows[i])) for i, a in enumerate(ids)}
    table = {a: {b: (spec["self"] if a == b else spec["default"]) for b in ids} for a in ids}
    for rule in spec["rules"]:
        for a in parse_cpulist(rule["from"]):
            for b in parse_cpulist(rule["to"]):
                if a != b:
                    table[a][b] = table[b][a] = rule["value"]
    return table


@dataclass(frozen=True)
class CpuFacts:
    node: int
    package: int
    core: int
    die: int
    siblings: frozenset[int]
    l3: frozenset[int]


def cpu_facts(desc: Description) -> Dict[int, CpuFacts]:
    """Package, core id, SMT siblings and L3 group of every online CPU.

    Core ids are numbered per package in order of the core's first thread,
    as the kernel does on most x86 parts (the numbers themselves are
    arbitrary; only equality within a package matters).
    """
    online = online_cpus(desc)
    offset = desc.get("smt_offset")
    node_of: Dict[int, Dict[str, Any]] = {}
    for node in desc["nodes"]:
        for cpu in parse_cpulist(node["cpus"]):
            node_of[cpu] = node

    def primary(cpu: int) -> int:
        return cpu - offset if offset and cpu >= offset else cpu

    def threads(cpu: int) -> frozenset[int]:
        first = primary(cpu)
        both = {first, first + offset} if offset else {first}
        return frozenset(both) & online

    packages: Dict[int, List[int]] = {}
    for cpu in sorted(node_of):
        packages.setdefault(node_of[cpu]["package"], [])
        if primary(cpu) == cpu:
            packages[node_of[cpu]["package"]].append(cpu)
    core_index = {first: i for cores in packages.values() for i, first in enumerate(cores)}

    l3_rule = desc.get("l3")
    l3_of: Dict[int, frozenset[int]] = {}
    if l3_rule is not None:
        for cpu, node in node_of.items():
            if l3_rule == "package":
                group = {c for c, n in node_of.items() if n["package"] == node["package"]}
            elif l3_rule == "node":
                group = set(parse_cpulist(node["cpus"]))
            else:
                per = int(l3_rule["cores_per_group"])
                cores = [c for c in packages[node["package"]] if node_of[c] is node]
                at = cores.index(primary(cpu)) // per
                group = set()
                for first in cores[at * per : (at + 1) * per]:
                    group |= {first, first + offset} if offset else {first}
            l3_of[cpu] = frozenset(group) & online
    return {
        cpu: CpuFacts(
            node=node_of[cpu]["id"],
            package=node_of[cpu]["package"],
            core=core_index[primary(cpu)],
            die=0,
            siblings=threads(cpu),
            l3=l3_of.get(cpu, frozenset()),
        )
        for cpu in sorted(node_of)
        if cpu in online
    }


# ------------------------------------------------------------- writing


_made: set[Path] = set()


def _write(path: Path, text: str) -> None:
    if path.parent not in _made:
        path.parent.mkdir(parents=True, exist_ok=True)
        _made.add(path.parent)
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def _mask(ids: frozenset[int], nbits: int) -> str:
    return format_cpumask(ids, nbits)


def highest_perf(desc: Description, cpu: int) -> Optional[int]:
    """The description's CPPC highest_perf of ``cpu``, None when it has none."""
    rule = desc.get("highest_perf")
    if rule is None:
        return None
    for cpus, value in rule.get("cpus", {}).items():
        if cpu in parse_cpulist(cpus):
            return int(value)
    return int(rule["default"])


def build_sysfs(desc_or_name: Union[str, Description], root: Union[str, os.PathLike[str]]) -> Path:
    """Write the fake sysfs tree of a machine under ``root`` and return it."""
    desc = _resolve(desc_or_name)
    base = Path(root)
    _made.clear()
    online = online_cpus(desc)
    every_cpu = set(online)
    for node in desc["nodes"]:
        every_cpu |= parse_cpulist(node["cpus"])
    nr_cpus = max(every_cpu) + 1
    node_ids = sorted(n["id"] for n in desc["nodes"])
    system = base / "devices" / "system"

    _write_cpus(desc, system, online, every_cpu, nr_cpus)
    if desc.get("numa_sysfs", True):
        _write_nodes(desc, system / "node", online, node_ids, nr_cpus)
    node_cpus = {n["id"]: parse_cpulist(n["cpus"]) & online for n in desc["nodes"]}
    _write_pci(desc, base / "bus" / "pci" / "devices", node_cpus, online, nr_cpus)
    if desc.get("kfd"):
        _write_kfd(desc, base / "class" / "kfd" / "kfd" / "topology", node_cpus)
    return base


def _write_cpus(
    desc: Description, system: Path, online: frozenset[int], every_cpu: Set[int], nr_cpus: int
) -> None:
    """devices/system/cpu: online, possible, each CPU's topology/, cache/ and acpi_cppc/."""
    cpu_dir = system / "cpu"
    _write(cpu_dir / "online", format_cpulist(online) + "\n")
    _write(cpu_dir / "possible", f"0-{nr_cpus - 1}\n")
    _write(cpu_dir / "present", f"0-{nr_cpus - 1}\n")
    facts = cpu_facts(desc)
    for cpu in sorted(every_cpu):
        here = cpu_dir / f"cpu{cpu}"
        if cpu != 0:  # the boot CPU usually has no 'online' file
            _write(here / "online", "1\n" if cpu in online else "0\n")
        if cpu not in online:
            here.mkdir(parents=True, exist_ok=True)
            continue  # the kernel removes topology/ and cache/ of offline CPUs
        info = facts[cpu]
        perf = highest_perf(desc, cpu)
        if perf is not None:
            _write(here / "acpi_cppc" / "highest_perf", f"{perf}\n")
        topo = here / "topology"
        _write(topo / "core_id", f"{info.core}\n")
        _write(topo / "physical_package_id", f"{info.package}\n")
        if desc.get("die_id", True):
            _write(topo / "die_id", f"{info.die}\n")
            die = frozenset(
                c for c, f in facts.items() if (f.package, f.die) == (info.package, info.die)
            )
            _write(topo / "die_cpus_list", format_cpulist(die) + "\n")
        _write(topo / "thread_siblings_list", format_cpulist(info.siblings) + "\n")
        _write(topo / "thread_siblings", _mask(info.siblings, nr_cpus) + "\n")
        package = frozenset(c for c, f in facts.items() if f.package == info.package)
        _write(topo / "core_siblings_list", format_cpulist(package) + "\n")
        cache = here / "cache"
        levels = [(1, "Data"), (1, "Instruction"), (2, "Unified")]
        for index, (level, kind) in enumerate(levels):
            _write(cache / f"index{index}" / "level", f"{level}\n")
            _write(cache / f"index{index}" / "type", f"{kind}\n")
            _write(
                cache / f"index{index}" / "shared_cpu_list", format_cpulist(info.siblings) + "\n"
            )
        if info.l3:
            _write(cache / "index3" / "level", "3\n")
            _write(cache / "index3" / "type", "Unified\n")
            _write(cache / "index3" / "shared_cpu_list", format_cpulist(info.l3) + "\n")
            _write(cache / "index3" / "shared_cpu_map", _mask(info.l3, nr_cpus) + "\n")


def _write_nodes(
    desc: Description, node_dir: Path, online: frozenset[int], node_ids: List[int], nr_cpus: int
) -> None:
    """devices/system/node: the node masks, each node's CPUs, distances and meminfo."""
    nodes_cpu = [n["id"] for n in desc["nodes"] if parse_cpulist(n["cpus"]) & online]
    nodes_mem = [n["id"] for n in desc["nodes"] if n.get("memory_mb")]
    _write(node_dir / "online", format_cpulist(node_ids) + "\n")
    _write(node_dir / "possible", format_cpulist(node_ids) + "\n")
    _write(node_dir / "has_cpu", format_cpulist(nodes_cpu) + "\n")
    _write(node_dir / "has_memory", format_cpulist(nodes_mem) + "\n")
    _write(node_dir / "has_normal_memory", format_cpulist(nodes_mem) + "\n")
    table = node_distances(desc)
    for node in desc["nodes"]:
        here = node_dir / f"node{node['id']}"
        cpus = parse_cpulist(node["cpus"])
        _write(here / "cpulist", format_cpulist(cpus) + "\n")
        _write(here / "cpumap", _mask(cpus, nr_cpus) + "\n")
        row = " ".join(str(table[node["id"]][b]) for b in node_ids)
        _write(here / "distance", row + "\n")
        if node.get("memory_mb") is not None:
            total = node["memory_mb"] * 1024
            free = node.get("free_mb", 0) * 1024
            nid = node["id"]
            lines = [
                f"Node {nid} MemTotal:       {total:8d} kB",
                f"Node {nid} MemFree:        {free:8d} kB",
                f"Node {nid} MemUsed:        {total - free:8d} kB",
                f"Node {nid} Active(anon):       1588 kB",
                f"Node {nid} HugePages_Total:     0",
            ]
            _write(here / "meminfo", "\n".join(lines) + "\n")


def _write_pci(
    desc: Description,
    pci: Path,
    node_cpus: Dict[int, frozenset[int]],
    online: frozenset[int],
    nr_cpus: int,
) -> None:
    """bus/pci/devices: each GPU's (and extra function's) ids, NUMA node and local CPUs."""
    for dev in list(desc.get("gpus", [])) + list(desc.get("extra_pci", [])):
        here = pci / dev["bus_id"]
        _write(here / "vendor", dev["vendor"] + "\n")
        _write(here / "device", dev["device"] + "\n")
        _write(here / "class", dev["class"] + "\n")
        numa = dev.get("numa_node", -1)
        _write(here / "numa_node", f"{numa}\n")
        if "local_cpulist" in dev:
            local = parse_cpulist(dev["local_cpulist"])
        else:
            local = node_cpus.get(numa, frozenset()) or online
        _write(here / "local_cpulist", format_cpulist(local) + "\n")
        _write(here / "local_cpus", _mask(local, nr_cpus) + "\n")


def _write_kfd(desc: Description, kfd: Path, node_cpus: Dict[int, frozenset[int]]) -> None:
    """class/kfd/kfd/topology: one KFD node per CPU node, then one per AMD GPU."""
    _write(kfd / "generation_id", "1\n")
    index = 0
    for node in desc["nodes"]:
        cpus = node_cpus[node["id"]]
        if not cpus:
            continue
        props = _kfd_properties(cpu_cores=len(cpus), simd=0, location=0, domain=0)
        _write(kfd / "nodes" / str(index) / "gpu_id", "0\n")
        _write(kfd / "nodes" / str(index) / "name", "\n")
        _write(kfd / "nodes" / str(index) / "properties", props)
        index += 1
    for gpu in desc.get("gpus", []):
        if gpu["vendor"] != "0x1002":
            continue
        domain, bus, devfn = _split_bdf(gpu["bus_id"])
        props = _kfd_properties(
            cpu_cores=0,
            simd=304,
            location=(bus << 8) | devfn,
            domain=domain,
            unique_id=gpu.get("kfd", {}).get("unique_id", 0),
            device_id=int(gpu["device"], 16),
        )
        here = kfd / "nodes" / str(index)
        _write(here / "gpu_id", f"{40000 + index * 1111}\n")
        _write(here / "name", "gfx942\n")
        _write(here / "properties", props)
        index += 1


def _split_bdf(bus_id: str) -> tuple[int, int, int]:
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    return int(domain, 16), int(bus, 16), (int(device, 16) << 3) | int(function, 16)


def _kfd_properties(
    *,
    cpu_cores: int,
    simd: int,
    location: int,
    domain: int,
    unique_id: int = 0,
    device_id: int = 0,
) -> str:
    """A KFD node ``properties`` file: one ``name value`` pair per line."""
    pairs = [
        ("cpu_cores_count", cpu_cores),
        ("simd_count", simd),
        ("mem_banks_count", 1),
        ("caches_count", 0),
        ("io_links_count", 1),
        ("cpu_core_id_base", 0),
        ("simd_id_base", 0 if simd == 0 else 2147487744),
        ("max_waves_per_simd", 0 if simd == 0 else 8),
        ("vendor_id", 0 if simd == 0 else 0x1002),
        ("device_id", device_id),
        ("location_id", location),
        ("domain", domain),
        ("drm_render_minor", 0 if simd == 0 else 128),
        ("hive_id", 0),
        ("unique_id", unique_id),
        ("num_sdma_engines", 0 if simd == 0 else 2),
    ]
    return "".join(f"{key} {value}\n" for key, value in pairs)


def gpu_expectations(desc: Description) -> List[Dict[str, Optional[int]]]:
    """Per GPU (driver order): the source's NUMA node and GPU memory node."""
    expect = desc.get("expect", {})
    return [
        {"numa_node": node, "memory_node": mem}
        for node, mem in zip(expect.get("gpu_numa_nodes", []), expect.get("gpu_memory_nodes", []))
    ]
