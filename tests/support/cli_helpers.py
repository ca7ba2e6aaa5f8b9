"""Running the ``pynumabind`` command in a child, and the two-node snapshot most of those runs use.

Shared by the CLI, discovery, planner, advisor and framework tests: each run
starts from a clean environment (no ``PYNUMABIND_*``, no launcher rank or
size, no ``CUDA_VISIBLE_DEVICES`` of the test's own), and ``env`` adds what
the test sets.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

#: The launcher variables a test's own environment may hold and a child must not inherit.
LAUNCHER_VARIABLES = (
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "CUDA_VISIBLE_DEVICES",
)

# The script installed with the interpreter running the tests, not whatever is on PATH.
_BESIDE = Path(sys.executable).with_name("pynumabind")
SCRIPT = str(_BESIDE) if _BESIDE.exists() else (shutil.which("pynumabind") or str(_BESIDE))


def clean_env(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This process's environment less PYNUMABIND_* and the launcher variables, plus ``env``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    for name in LAUNCHER_VARIABLES:
        full.pop(name, None)
    full.update(env or {})
    return full


def run(
    *args: str, env: Optional[Dict[str, str]] = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The installed console script with ``args``, over :func:`clean_env`."""
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, env=clean_env(env), timeout=timeout
    )


def run_cli(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pynumabind ARGS`` (this interpreter's package), over :func:`clean_env`."""
    return subprocess.run(
        [sys.executable, "-m", "pynumabind", *args],
        capture_output=True,
        text=True,
        env=clean_env(env),
        timeout=120,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """``result`` exited ``code`` with one ``pynumabind: error:`` line naming ``words``."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pynumabind: error: ")
    for word in words:
        assert word in lines[0], (word, lines[0])


def two_node_snapshot(path: Path, gpu_nodes: Sequence[int] = (0, 1)) -> Path:
    """A two-node machine, GPU 0 on node 0 (CPU 0), GPU 1 on node 1 (CPU 1).

    Its CPUs are this machine's CPUs 0 and 1, so a plan made from it can be
    applied here for real.  This machine has one memory node, so the planner
    (reading the allowed memory nodes from the process, not the file) puts
    node 1's memory on node 0, and the plans say so.  ``gpu_nodes`` moves the
    GPUs: ``(1, 1)`` puts both on node 1.
    """
    data = {
        "schema": 1,
        "nodes": [
            {"id": 0, "cpus": "0", "has_memory": True, "distances": {"0": 10, "1": 21}},
            {"id": 1, "cpus": "1", "has_memory": True, "distances": {"0": 21, "1": 10}},
        ],
        "cpus": [
            {"id": 0, "node": 0, "package": 0, "core": 0, "siblings": "0", "l3": "0"},
            {"id": 1, "node": 1, "package": 1, "core": 0, "siblings": "1", "l3": "1"},
        ],
        "gpus": [
            {
                "index": index,
                "pci_bus_id": bus,
                "vendor": "nvidia",
                "numa_node": gpu_nodes[index],
                "local_cpus": str(gpu_nodes[index]),
                "uuid": f"GPU-0000000{index}-test-snapshot",
                "model": "snapshot GPU",
                "memory_node": None,
                "physical_index": index,
                "source": "snapshot",
            }
            for index, bus in ((0, "0000:17:00.0"), (1, "0000:65:00.0"))
        ],
        "allowed_cpus": "0-1",
        "allowed_mems": "0-1",
        "notes": ["two-node test machine over this machine's CPUs 0 and 1"],
    }
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path
