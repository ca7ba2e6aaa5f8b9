"""Memory bandwidth and latency: unbound, local, remote (every node pair) and interleaved."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from pynumabind import _libnuma

from .common import Settings, Setup, run_worker, say
from .machine import NodeInfo, l3_cache_bytes, read_nodes
from .stats import Summary, ratio, summarize

__all__ = ["locality_setups", "run_locality"]


def locality_setups(
    nodes: List[NodeInfo], allowed_cpus: frozenset[int], allowed_mems: frozenset[int]
) -> List[Setup]:
    """Unbound, then every (CPU node, memory node) pair, then interleaved per CPU node."""
    cpu_nodes = [n for n in nodes if n.cpus & allowed_cpus]
    mem_nodes = [n.id for n in nodes if n.has_memory and n.id in allowed_mems]
    if not mem_nodes:  # meminfo unreadable: trust the allowed set
        mem_nodes = sorted(allowed_mems)
    setups = [Setup(name="unbound")]
    for cpu in cpu_nodes:
        cpus = cpu.cpus & allowed_cpus
        for mem in mem_nodes:
            where = "local" if mem == cpu.id else "remote"
            setups.append(
                Setup(
                    name=f"{where}: cpus node {cpu.id}, memory node {mem}",
                    cpus=cpus,
                    policy="bind",
                    mems=frozenset({mem}),
                    cpu_node=cpu.id,
                    mem_node=mem,
                )
            )
    for cpu in cpu_nodes:
        setups.append(
            Setup(
                name=f"interleaved: cpus node {cpu.id}, memory nodes "
                + ",".join(str(m) for m in mem_nodes),
                cpus=cpu.cpus & allowed_cpus,
                policy="interleave",
                mems=frozenset(mem_nodes),
                cpu_node=cpu.id,
            )
        )
    return setups


def setup_kind(setup: Setup) -> str:
    if setup.policy is None:
        return "unbound"
    if setup.policy == "interleave":
        return "interleaved"
    return "local" if setup.cpu_node == setup.mem_node else "remote"


def _measured(result: Dict[str, Any]) -> Dict[str, Any]:
    """A worker result reduced to summary + evidence (raw samples kept too: they are few)."""
    if "error" in result or "unavailable" in result:
        return {k: result[k] for k in ("error", "unavailable") if k in result}
    summary = summarize(result["samples"], result["unit"])
    out = {"summary": summary.to_dict(), "samples": result["samples"]}
    for key in ("applied", "placement", "bytes", "threads", "steps"):
        if key in result:
            out[key] = result[key]
    return out


def run_locality(settings: Settings) -> Dict[str, Any]:
    nodes = read_nodes()
    allowed_cpus = frozenset(os.sched_getaffinity(0))
    try:
        allowed_mems = _libnuma.get_mems_allowed()
    except OSError as exc:
        return {"available": False, "reason": f"cannot read the allowed memory nodes: {exc}"}
    setups = locality_setups(nodes, allowed_cpus, allowed_mems)
    cpu_node_sizes = [len(s.cpus) for s in setups if s.cpus is not None]
    threads = max(1, min(cpu_node_sizes) if cpu_node_sizes else len(allowed_cpus))
    mem_nodes = sorted({s.mem_node for s in setups if s.mem_node is not None})
    remote_available = any(setup_kind(s) == "remote" for s in setups)
    l3 = l3_cache_bytes()
    if l3 is None:
        latency_bytes = 256 << 20
        l3_note = "L3 size unreadable from sysfs: chasing over 256 MiB"
    else:
        latency_bytes = max(l3 * (2 if settings.quick else 4), 32 << 20)
        l3_note = f"chase buffer = {latency_bytes >> 20} MiB, {latency_bytes / l3:.0f}x the L3"
    out: Dict[str, Any] = {
        "available": True,
        "threads": threads,
        "l3_bytes": l3,
        "latency_note": l3_note,
        "memory_nodes": mem_nodes,
        "remote": {
            "available": remote_available,
            "reason": None
            if remote_available
            else f"only one NUMA node with memory ({', '.join(map(str, mem_nodes))}): "
            "remote memory is unavailable on this machine",
        },
        "setups": [],
    }
    if not remote_available:
        say(f"  locality: {out['remote']['reason']}")
    bandwidth_task = {
        "kind": "bandwidth",
        "threads": threads,
        "bytes": settings.bandwidth_bytes,
        "reps": settings.bandwidth_reps,
    }
    latency_task = {
        "kind": "latency",
        "bytes": latency_bytes,
        "steps": settings.latency_steps,
        "reps": settings.latency_reps,
        "build_dir": settings.build_dir,
    }
    for setup in setups:
        say(f"  locality: {setup.name}")
        entry: Dict[str, Any] = {"kind": setup_kind(setup), **setup.to_dict()}
        entry["bandwidth"] = _measured(run_worker(setup, bandwidth_task, timeout=300))
        entry["latency"] = _measured(run_worker(setup, latency_task, timeout=300))
        if setup_kind(setup) == "interleaved" and len(setup.mems) < 2:
            entry["note"] = "interleaving over a single node is the same as local memory"
        out["setups"].append(entry)
    out["ratios"] = locality_ratios(out["setups"])
    return out


def _summary(entry: Dict[str, Any], metric: str) -> Optional[Summary]:
    data = entry.get(metric, {}).get("summary")
    return None if data is None else Summary.from_dict(data)


def locality_ratios(entries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each setup against the local one of its CPU node (and unbound against node-0-local)."""
    local = {e["cpu_node"]: e for e in entries if e["kind"] == "local"}
    ratios: List[Dict[str, Any]] = []
    for entry in entries:
        if entry["kind"] == "local":
            continue
        reference = local.get(entry["cpu_node"]) if entry["cpu_node"] is not None else None
        if reference is None and local:
            reference = local[min(local)]
        if reference is None:
            continue
        for metric in ("bandwidth", "latency"):
            mine, theirs = _summary(entry, metric), _summary(reference, metric)
            if mine is None or theirs is None:
                continue
            r = ratio(entry["name"], mine, reference["name"], theirs)
            ratios.append({"metric": metric, **r.to_dict()})
    return ratios
