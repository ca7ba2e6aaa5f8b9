"""Shared plumbing: run settings, worker subprocesses, setups, logging to the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple

if TYPE_CHECKING:
    from pynumabind.model import Topology

__all__ = [
    "Settings",
    "Setup",
    "bare_python",
    "detect_topology",
    "discovery_api",
    "read_topology",
    "run_worker",
    "say",
    "worker_env",
]

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------ discovery
#
# Every use of the library's discovery API in the benchmarks goes through
# the two helpers below, and they reach the library through ``discovery_api``
# alone: when discovery moves again, the import line there is the one to change.


def discovery_api() -> Any:
    """The module whose ``topology_from_sysfs(root, ...)``/``detect_topology(...)`` discover."""
    from pynumabind import discovery as api

    return api


def read_topology(root: str = "/sys", **options: Any) -> Topology:
    """The machine under sysfs ``root``, files only (no NVML), as the library reads it."""
    topology: Topology = discovery_api().topology_from_sysfs(root, **options)
    return topology


def detect_topology(**options: Any) -> Topology:
    """This machine and process (sysfs + NVML + visibility); ``sysfs_root=`` for a fake tree."""
    topology: Topology = discovery_api().detect_topology(**options)
    return topology


def say(message: str) -> None:
    """Progress for the person running the suite (stderr, so stdout stays clean)."""
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Settings:
    """Sizes and repetitions.  ``quick`` keeps the whole suite under a minute on 2 cores."""

    quick: bool
    install_numactl: bool = True
    build_dir: Optional[str] = None

    # overhead
    @property
    def startup_reps(self) -> int:
        return 7 if self.quick else 25

    @property
    def apply_reps(self) -> int:
        return 200 if self.quick else 2000

    # targets (issue 14's table): timed calls per fresh process (second bind, from_sysfs)
    @property
    def inner_reps(self) -> int:
        return 20 if self.quick else 50

    # scaling: generated sysfs trees (the 4,096-CPU tree alone takes ~10 s to write)
    @property
    def scaling_cpus(self) -> Tuple[int, ...]:
        return (2, 64, 256, 1024) if self.quick else (2, 64, 256, 1024, 4096)

    def scaling_reps(self, cpus: int) -> int:
        """Rounds over the modes for a ``cpus``-CPU tree: more where a round is cheap.

        A preempted read costs a scheduler tick (ms) on a shared box, as much
        as a whole small discovery, so small trees need more samples.
        """
        base = 3 if self.quick else 7
        return base * (4 if cpus <= 64 else 2 if cpus <= 256 else 1)

    # threads: apply_plan with this many threads alive
    thread_counts: Tuple[int, ...] = (1, 10, 100, 1000)

    def thread_reps(self, threads: int) -> int:
        """Repetitions at ``threads`` threads: fewer as each apply gets longer."""
        return max(10, self.apply_reps // max(1, threads // 10))

    # first touch: a 1 GiB buffer (128 MiB with --quick), rounds of each touch
    @property
    def firsttouch_bytes(self) -> int:
        return (128 << 20) if self.quick else (1 << 30)

    @property
    def firsttouch_rounds(self) -> int:
        return 3 if self.quick else 7

    # jitter
    @property
    def jitter_iterations(self) -> int:
        return 1000 if self.quick else 5000

    @property
    def jitter_work(self) -> int:
        """Loop trips per iteration (~0.2 ms on a 2020s core)."""
        return 200_000


@dataclass(frozen=True)
class Setup:
    """How the measured process is placed: CPUs (``None``: untouched) and memory policy."""

    name: str
    cpus: Optional[frozenset[int]] = None
    policy: Optional[str] = None  # "bind", "interleave", "preferred" or None (default policy)
    mems: frozenset[int] = frozenset()
    cpu_node: Optional[int] = None
    mem_node: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "cpus": None if self.cpus is None else sorted(self.cpus),
            "policy": self.policy,
            "mems": sorted(self.mems),
            "cpu_node": self.cpu_node,
            "mem_node": self.mem_node,
        }


def worker_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of a worker: this package importable, BLAS/OpenMP pools single-threaded."""
    env = dict(os.environ)
    paths: Iterable[str] = [PACKAGE_PARENT, *filter(None, env.get("PYTHONPATH", "").split(":"))]
    env["PYTHONPATH"] = ":".join(dict.fromkeys(paths))
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, "1")
    env.update(extra or {})
    return env


def bare_python(env: Dict[str, str]) -> Tuple[List[str], Dict[str, str]]:
    """``python -S`` and an environment in which it still finds pynumabind and its dependencies.

    Without ``-S``, ``site`` runs every ``.pth`` file of site-packages, and
    one that imports modules (some environments' do: typing, re, enum...)
    makes a "bare interpreter" figure too small.  ``-S`` skips site; the
    directories it would have added (this interpreter's site-packages, and
    where pynumabind itself is found, editable installs included) go on
    ``PYTHONPATH`` after what ``env`` already has there.
    """
    import pynumabind

    here = os.path.dirname(os.path.dirname(os.path.abspath(pynumabind.__file__)))
    sites = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    current = [p for p in env.get("PYTHONPATH", "").split(":") if p]
    out = dict(env)
    out["PYTHONPATH"] = ":".join(dict.fromkeys([*current, here, *sites]))
    return [sys.executable, "-S"], out


def run_worker(setup: Setup, task: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """Run one measurement in a fresh interpreter; its JSON result (``error`` on failure)."""
    spec = json.dumps({"setup": setup.to_dict(), "task": task})
    argv = [sys.executable, "-m", "benchmarks.worker", spec]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=worker_env(), check=False
        )
    except subprocess.TimeoutExpired:
        return {"setup": setup.to_dict(), "error": f"worker timed out after {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip()[-800:]
        return {
            "setup": setup.to_dict(),
            "error": f"worker exited {done.returncode}: {tail or 'no output'}",
        }
    result: Dict[str, Any] = json.loads(lines[-1])
    return result
