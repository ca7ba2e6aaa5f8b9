"""How detect + plan grow with the machine: generated sysfs trees of 2 to 4,096 CPUs.

For each CPU count of :data:`benchmarks.trees.SCALING_CPUS` a machine is
generated (:func:`benchmarks.trees.generated_machine`: its shape is in the
JSON), written as a sysfs tree (on ``/dev/shm`` when it is there: tmpfs,
in memory like sysfs), and a fresh process times, per CPU mode, ``detect``
(files only, no NVML) and then ``plan`` for rank 0 of one rank per GPU.
Discovery does not depend on the mode today; it is timed per mode so that a
discovery that reads only what the mode needs (issue 14) shows here.

Reading files from tmpfs is not reading sysfs (whose ``show`` handlers do
work per read); the series shows growth, the DGX row of the ``targets``
suite an absolute figure.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, Optional, Sequence

from .common import Settings, say, worker_env
from .overhead import _run_json
from .stats import summarize
from .trees import build_tree, count_files, generated_machine, machine_shape, sysfs_tree_module

__all__ = ["MODES", "run_scaling", "tree_directory"]

MODES = ("node", "socket", "exclusive", "core-complex")


def tree_directory() -> Optional[str]:
    """Where trees are written: tmpfs ``/dev/shm`` when writable, else the default temp dir."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def run_scaling(
    settings: Settings,
    *,
    cpus: Optional[Sequence[int]] = None,
    reps: Optional[int] = None,
    modes: Sequence[str] = MODES,
) -> Dict[str, Any]:
    """The series; ``cpus``/``reps``/``modes`` override the settings."""
    sizes = tuple(settings.scaling_cpus if cpus is None else cpus)
    try:
        generator = sysfs_tree_module()
    except ImportError as exc:
        return {"available": False, "reason": str(exc)}
    parent = tree_directory()
    out: Dict[str, Any] = {
        "available": True,
        "modes": list(modes),
        "tree_filesystem": "tmpfs (/dev/shm)" if parent else "default temporary directory",
        "nvml": "not used (no GPU behind a generated tree)",
        "machines": [],
    }
    for count in sizes:
        packages, per_package, smt = machine_shape(count)
        desc = generated_machine(count)
        rounds = settings.scaling_reps(count) if reps is None else reps
        entry: Dict[str, Any] = {
            "cpus": count,
            "reps": rounds,
            "packages": packages,
            "nodes": packages * per_package,
            "smt": smt,
            "gpus": len(desc["gpus"]),
            "pci_functions": len(desc["gpus"]) + len(desc["extra_pci"]),
            "l3": desc["l3"],
        }
        scratch = tempfile.mkdtemp(prefix="pynumabind-scaling-", dir=parent)
        try:
            say(f"  scaling: writing a {count}-CPU tree")
            start = time.monotonic()
            build_tree(desc, scratch, generator)
            entry["tree_write_s"] = round(time.monotonic() - start, 2)
            entry["tree_files"] = count_files(scratch)
            say(f"  scaling: {count} CPUs, detect + plan x {rounds} per mode")
            argv = [
                sys.executable,
                "-m",
                "benchmarks.probe",
                "scaling",
                scratch,
                str(rounds),
                str(entry["gpus"]),
                *modes,
            ]
            result = _run_json(argv, worker_env(), timeout=600)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if "error" in result:
            entry["error"] = result["error"]
            out["machines"].append(entry)
            continue
        entry["first_detect_ms"] = result["first_detect_ms"]
        entry["discovered"] = {k: result[k] for k in ("cpus", "nodes", "gpus")}
        entry["modes"] = {}
        for mode, data in result["modes"].items():
            entry["modes"][mode] = {
                "detect": summarize(data["detect_ms"], "ms").to_dict(),
                "plan": summarize(data["plan_ms"], "ms").to_dict(),
                "total": summarize(data["total_ms"], "ms").to_dict(),
                "plan_result": data["plan"],
            }
        out["machines"].append(entry)
    return out
