"""Pinned host<->device copy bandwidth per GPU: worker on the GPU's node, on a remote node, unbound.

Runs only when torch with CUDA is importable; otherwise it reports why it
was skipped.  Sized (64/256 MiB x 5/20 repetitions x 2 directions x 3
setups) to take well under a minute per GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

from .common import Settings, Setup, detect_topology, run_worker, say, worker_env
from .machine import NodeInfo, read_nodes
from .stats import Summary, ratio, summarize

__all__ = ["gpu_nodes", "run_gpu"]

_LIST_GPUS = (
    "import json, torch\n"
    "ok = torch.cuda.is_available()\n"
    "gpus = []\n"
    "for i in range(torch.cuda.device_count() if ok else 0):\n"
    "    p = torch.cuda.get_device_properties(i)\n"
    "    bus = None\n"
    "    if hasattr(p, 'pci_bus_id'):\n"
    "        bus = '%04x:%02x:%02x.0' % (getattr(p, 'pci_domain_id', 0), p.pci_bus_id,"
    " p.pci_device_id)\n"
    "    gpus.append({'index': i, 'name': p.name, 'pci_bus_id': bus})\n"
    "print(json.dumps({'cuda': ok, 'torch': torch.__version__, 'gpus': gpus}))\n"
)


def _sysfs_numa_node(bus_id: Optional[str]) -> Optional[int]:
    if not bus_id:
        return None
    try:
        with open(f"/sys/bus/pci/devices/{bus_id.lower()}/numa_node", encoding="ascii") as handle:
            value = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def gpu_nodes(gpus: List[Dict[str, Any]]) -> Dict[int, Tuple[Optional[int], str]]:
    """CUDA ordinal -> (NUMA node, where it came from); pynumabind's discovery first."""
    found: Dict[int, Tuple[Optional[int], str]] = {}
    try:
        for gpu in detect_topology().gpus:
            if gpu.numa_node is not None:
                found[gpu.index] = (gpu.numa_node, f"pynumabind ({gpu.source})")
    except Exception as exc:  # discovery absent or failing: fall back to sysfs
        say(f"  gpu: pynumabind discovery unavailable ({type(exc).__name__}); using sysfs")
    for listed in gpus:
        if listed["index"] not in found:
            node = _sysfs_numa_node(listed.get("pci_bus_id"))
            found[listed["index"]] = (node, "sysfs numa_node")
    return found


def _setups(node: Optional[int], nodes: List[NodeInfo]) -> Tuple[List[Setup], Optional[str]]:
    allowed = frozenset(os.sched_getaffinity(0))
    setups = [Setup(name="unbound")]
    if node is None:
        return setups, "the GPU's NUMA node is unknown: only the unbound setup runs"
    by_id = {n.id: n for n in nodes}
    local = by_id.get(node)
    if local is None or not local.cpus & allowed:
        return setups, f"the GPU's node {node} has no allowed CPUs: only the unbound setup runs"
    setups.append(
        Setup(
            name=f"local: node {node}",
            cpus=local.cpus & allowed,
            policy="bind",
            mems=frozenset({node}),
            cpu_node=node,
            mem_node=node,
        )
    )
    remote = [n for n in nodes if n.id != node and n.cpus & allowed and n.has_memory]
    if not remote:
        return setups, "only one NUMA node: the remote setup is unavailable"
    far = remote[0]
    setups.append(
        Setup(
            name=f"remote: node {far.id}",
            cpus=far.cpus & allowed,
            policy="bind",
            mems=frozenset({far.id}),
            cpu_node=far.id,
            mem_node=far.id,
        )
    )
    return setups, None


def run_gpu(settings: Settings) -> Dict[str, Any]:
    if importlib.util.find_spec("torch") is None:
        return {"available": False, "reason": "torch is not installed: GPU benchmark skipped"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _LIST_GPUS],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            env=worker_env(),
        )
    except subprocess.TimeoutExpired:
        return {"available": False, "reason": "probing torch for CUDA devices timed out"}
    listing = done.stdout.strip().splitlines()
    try:
        info = json.loads(listing[-1]) if done.returncode == 0 and listing else None
    except ValueError:
        info = None
    if info is None:
        tail = done.stderr.strip()[-300:]
        return {"available": False, "reason": f"torch could not be probed: {tail}"}
    if not info["cuda"] or not info["gpus"]:
        return {
            "available": False,
            "reason": f"torch {info['torch']} has no usable CUDA device: GPU benchmark skipped",
        }
    nodes = read_nodes()
    placement = gpu_nodes(info["gpus"])
    task_base = {"kind": "gpu", "bytes": settings.gpu_bytes, "reps": settings.gpu_reps}
    out: Dict[str, Any] = {"available": True, "torch": info["torch"], "gpus": []}
    for gpu in info["gpus"]:
        node, source = placement[gpu["index"]]
        setups, note = _setups(node, nodes)
        entry: Dict[str, Any] = {**gpu, "numa_node": node, "node_source": source, "setups": []}
        if note:
            entry["note"] = note
            say(f"  gpu {gpu['index']}: {note}")
        for setup in setups:
            say(f"  gpu {gpu['index']}: {setup.name}")
            result = run_worker(setup, {**task_base, "gpu": gpu["index"]}, timeout=300)
            row: Dict[str, Any] = {**setup.to_dict()}
            if "error" in result:
                row["error"] = result["error"]
            else:
                for direction in ("h2d", "d2h"):
                    row[direction] = summarize(result[direction], "GB/s").to_dict()
                row["placement"] = result.get("placement")
                row["applied"] = result.get("applied")
            entry["setups"].append(row)
        entry["ratios"] = _ratios(entry["setups"])
        out["gpus"].append(entry)
    return out


def _ratios(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    local = next((r for r in rows if r["name"].startswith("local") and "h2d" in r), None)
    if local is None:
        return []
    ratios: List[Dict[str, Any]] = []
    for row in rows:
        if row is local or "h2d" not in row:
            continue
        for direction in ("h2d", "d2h"):
            mine = Summary.from_dict(row[direction])
            theirs = Summary.from_dict(local[direction])
            r = ratio(row["name"], mine, local["name"], theirs)
            ratios.append({"metric": direction, **r.to_dict()})
    return ratios
