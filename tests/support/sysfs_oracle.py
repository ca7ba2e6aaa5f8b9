"""The per-CPU sysfs reader pynumabind first used, kept as a test oracle.

It reads every CPU's own files (about 13 per CPU), trusting no list to
describe a group.  ``pynumabind._os.sysfs._read_cpus`` now reads each fact once per group
that shares it; tests check both give the same CPUs and notes on every
machine fixture and on this machine's ``/sys``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Mapping

from pynumabind._os.caches import l3_group
from pynumabind._os.textfile import SysfsReader
from pynumabind._text import format_ids
from pynumabind.model import Cpu


def _l3(sysfs: SysfsReader, cpu: int, online: frozenset[int], missing: List[int]) -> frozenset[int]:
    group = l3_group(sysfs, cpu, online)
    if group is None:
        missing.append(cpu)
    return group or frozenset()


def read_cpus_per_cpu(
    sysfs: SysfsReader, online: frozenset[int], node_of: Mapping[int, int], notes: List[str]
) -> Dict[int, Cpu]:
    cpus: Dict[int, Cpu] = {}
    no_topology: List[int] = []
    no_die = False
    no_l3: List[int] = []
    for cpu in sorted(online):
        base = ("devices", "system", "cpu", f"cpu{cpu}")
        core = sysfs.integer(*base, "topology", "core_id", required=False)
        package = sysfs.integer(*base, "topology", "physical_package_id", required=False)
        if core is None or package is None:
            no_topology.append(cpu)
            cpus[cpu] = Cpu(id=cpu, node=node_of.get(cpu), package=0, core=cpu)
            continue
        die = sysfs.integer(*base, "topology", "die_id", required=False)
        no_die = no_die or die is None
        siblings = sysfs.cpulist(*base, "topology", "thread_siblings_list", required=False)
        cpus[cpu] = Cpu(
            id=cpu,
            node=node_of.get(cpu),
            # -1 is what the kernel prints when firmware gives no package.
            package=max(package, 0),
            core=core,
            die=die if die is not None and die >= 0 else None,
            siblings=(siblings or frozenset({cpu})) & online,
            l3=_l3(sysfs, cpu, online, no_l3),
        )
    perfs = {
        cpu: sysfs.integer(
            "devices", "system", "cpu", f"cpu{cpu}", "acpi_cppc", "highest_perf", required=False
        )
        for cpu in sorted(online)
    }
    if all(value is not None for value in perfs.values()):  # all or nothing
        cpus = {cpu: replace(info, highest_perf=perfs[cpu]) for cpu, info in cpus.items()}
    if no_topology:
        notes.append(
            f"no topology/ for CPUs {format_ids(frozenset(no_topology))}: "
            "each is taken as its own core in package 0"
        )
    if no_die:
        notes.append("topology/die_id missing: dies unknown")
    if no_l3:
        notes.append(f"no L3 cache information for CPUs {format_ids(frozenset(no_l3))}")
    return cpus
