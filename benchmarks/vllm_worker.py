"""What ``--worker-cls pynumabind.integrations.vllm.Worker`` adds to a vLLM worker's start.

Run with a Python that has vLLM (``.ci/install-frameworks ROOT vllm``)::

    ROOT/vllm/bin/python -m benchmarks.vllm_worker [--runs 15] [--json FILE]

Each run is a fresh interpreter that first imports vLLM's GPU worker module
(a vLLM worker process has it loaded before it resolves ``--worker-cls``;
not timed), then times:

* ``import``: importing ``pynumabind.integrations.vllm`` (the version check,
  the subclass, pynumabind's lazy package);
* ``bind``: the hook that runs at the start of ``init_device``: vLLM's GPU
  index from a real ``ParallelConfig`` (TP=2, worker local_rank 1), the
  machine (a two-node snapshot over this machine's CPUs 0 and 1, through
  ``PYNUMABIND_TOPOLOGY``, since this machine has no GPU; on a GPU server
  this is sysfs + NVML discovery instead), the plan, and the syscalls that
  bind every thread and set the memory policy, read back.

Reports median [IQR] in milliseconds over the runs, and JSON with every
sample.  Nothing here is a pass/fail threshold.  Measure a regular install
(``pip install .``, as .ci/install-frameworks does): an editable one has no
generated cffi module and parses libnuma's declarations at run time, which
the output flags (``cffi module generated: no``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Dict, List

from .stats import summarize

CHILD = textwrap.dedent(
    """
    import json, os, time
    from types import SimpleNamespace
    import vllm.v1.worker.gpu_worker  # loaded in every vLLM worker already
    from vllm.config import ParallelConfig
    config = ParallelConfig(tensor_parallel_size=2)
    t0 = time.perf_counter()
    from pynumabind.integrations.vllm import bind_worker
    t1 = time.perf_counter()
    worker = SimpleNamespace(
        vllm_config=SimpleNamespace(parallel_config=config), rank=1, local_rank=1
    )
    binding = bind_worker(worker)
    t2 = time.perf_counter()
    import importlib.util
    print(json.dumps({
        "ffi": importlib.util.find_spec("pynumabind._libnuma_ffi") is not None,
        "import_ms": (t1 - t0) * 1e3,
        "bind_ms": (t2 - t1) * 1e3,
        "cpus": sorted(os.sched_getaffinity(0)),
        "summary": binding.summary(),
    }))
    """
)


def snapshot(path: Path) -> None:
    """The two-node machine the integration tests use (GPU i on node i = CPU i)."""
    nodes = [
        {
            "id": i,
            "cpus": str(i),
            "has_memory": True,
            "distances": {"0": 10 + 11 * i, "1": 21 - 11 * i},
        }
        for i in (0, 1)
    ]
    data = {
        "schema": 1,
        "nodes": nodes,
        "cpus": [
            {"id": i, "node": i, "package": i, "core": 0, "siblings": str(i), "l3": str(i)}
            for i in (0, 1)
        ],
        "gpus": [
            {
                "index": i,
                "pci_bus_id": f"0000:{0x17 + 0x4E * i:02x}:00.0",
                "vendor": "nvidia",
                "numa_node": i,
                "local_cpus": str(i),
                "uuid": f"GPU-bench-{i}",
                "model": None,
                "memory_node": None,
                "physical_index": i,
                "source": "snapshot",
            }
            for i in (0, 1)
        ],
        "allowed_cpus": "0-1",
        "allowed_mems": "0-1",
        "notes": [],
    }
    path.write_text(json.dumps(data), encoding="utf-8")


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_worker")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None, help="write every sample here")
    args = parser.parse_args(argv)
    samples: Dict[str, List[float]] = {"import_ms": [], "bind_ms": []}
    last: Dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        machine = Path(tmp) / "two-node.json"
        snapshot(machine)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
        env.update(
            {
                "PYNUMABIND_TOPOLOGY": str(machine),
                "CUDA_VISIBLE_DEVICES": "0,1",
                "VLLM_TARGET_DEVICE": "cpu",
            }
        )
        for run in range(args.runs):
            done = subprocess.run(
                [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=False
            )
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            last = json.loads(done.stdout.strip().splitlines()[-1])
            for key, values in samples.items():
                values.append(float(last[key]))  # type: ignore[arg-type]
            print(
                f"run {run + 1}/{args.runs}: import {last['import_ms']:.1f} ms, "
                f"bind {last['bind_ms']:.1f} ms",
                file=sys.stderr,
            )
    summaries = {key: summarize(values, "ms") for key, values in samples.items()}
    total = summarize([a + b for a, b in zip(samples["import_ms"], samples["bind_ms"])], "ms")
    print(f"import pynumabind.integrations.vllm  {summaries['import_ms'].text()}")
    print(f"bind in init_device                  {summaries['bind_ms'].text()}")
    print(f"total added to a worker's start      {total.text()}")
    print(f"(last run: {last.get('summary')})")
    print(f"cffi module generated: {'yes' if last.get('ffi') else 'no (editable install)'}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "samples": samples,
                    "summaries": {k: s.to_dict() for k, s in summaries.items()},
                    "total": total.to_dict(),
                },
                indent=2,
            ),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
