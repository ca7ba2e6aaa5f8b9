"""A real torchrun job: 2 local workers (gloo backend), each binding itself.

Each worker runs docs/site/torchrun.md's torchrun recipe unchanged:
``pynumabind.bind_current_process()`` with no arguments -- rank and size come
from torchrun's LOCAL_RANK/LOCAL_WORLD_SIZE, options from PYNUMABIND_* -- and
``dist.init_process_group()``; the test adds code before it (counting threads,
or starting torch's thread pool first) and after it (an ``all_reduce``, then
a report of what the kernel says).  The test compares each
report with the plan the planner makes for that rank on this machine.

torch is not in the ``test`` extra: the README's test command needs nothing but
PyPI's ordinary packages, and torch's wheels are large.  The test runs wherever
torch is already importable and skips otherwise, saying so; CI runs it in the
vLLM environment of ``.ci/integrations`` (which has a CPU torch), where
``PYNUMABIND_INTEGRATIONS_REQUIRED=1`` turns a missing torch into a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from pynumabind.discovery import detect_topology

from ..support.recipes import recipe

REQUIRED_ENV = "PYNUMABIND_INTEGRATIONS_REQUIRED"
NO_TORCH = (
    "torch is not importable in this Python: the real torchrun test runs where torch is "
    "installed (CI: the vLLM environment of .ci/integrations; here: install any torch build, "
    "e.g. `pip install torch --index-url https://download.pytorch.org/whl/cpu`)"
)


def _torch_missing() -> bool:
    """True when torch cannot be imported here (a failure instead under ``REQUIRED_ENV=1``)."""
    if importlib.util.find_spec("torch") is not None:
        return False
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{REQUIRED_ENV}=1 but {NO_TORCH}", pytrace=False)
    return True


pytestmark = [
    pytest.mark.recipes,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1"),
]


@pytest.fixture(autouse=True)
def _need_torch() -> None:
    if _torch_missing():
        pytest.skip(NO_TORCH)


# Before the recipe: count the threads it will find.  The first test also
# starts torch's intra-op (OpenMP) pool first, as a real worker might: those
# threads already exist when the recipe binds and must be rebound too.
PLAIN_START = """\
import os
threads_before = len(os.listdir("/proc/self/task"))
"""
WARM_START = """\
import os
import torch
torch.set_num_threads(2)
warm = torch.ones(256, 256)
(warm @ warm).sum()
threads_before = len(os.listdir("/proc/self/task"))
"""

# After the recipe (which defines ``binding`` and initialises ``dist``):
# a real collective on the bound CPUs, then what the kernel says.
REPORT = textwrap.dedent(
    """
    # --- added by the test: a real op, then report what the kernel says ---
    import json, os, sys
    import torch
    from pynumabind._os import libnuma as _libnuma

    total = torch.tensor([float(os.environ["LOCAL_RANK"])])
    dist.all_reduce(total)
    with open("/proc/self/status") as handle:
        status = dict(l.rstrip("\\n").split(":\\t", 1) for l in handle if ":\\t" in l)
    tasks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as handle:
                for line in handle:
                    if line.startswith("Cpus_allowed_list:"):
                        tasks[tid] = line.split(":", 1)[1].strip()
        except FileNotFoundError:
            pass
    policy = _libnuma.get_mempolicy()
    report = {
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "cpus": status["Cpus_allowed_list"].strip(),
        "task_cpus": sorted(set(tasks.values())),
        "policy": [policy.kernel_policy, sorted(policy.nodes)],
        "binding": binding.to_dict(),
        "verify": binding.verify().to_dict(),
        "all_reduce": total.item(),
        "threads_before": threads_before,
    }
    with open(os.path.join(sys.argv[1], f"rank{report['local_rank']}.json"), "w") as out:
        json.dump(report, out)
    dist.destroy_process_group()
    """
)


def _torchrun(tmp_path, extra_env, start=PLAIN_START):
    """Run docs/site/torchrun.md's torchrun recipe (between ``start`` and REPORT) in 2 workers."""
    script = tmp_path / "train.py"
    script.write_text(start + recipe("torchrun") + REPORT)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("PYNUMABIND_") or name in ("LOCAL_RANK", "SLURM_LOCALID"):
            del env[name]
    env.update(extra_env)
    env["OMP_NUM_THREADS"] = "2"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(script),
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout}\n{proc.stderr}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def _expected_plans(**options):
    """Each rank's plan, its count read from torchrun's LOCAL_WORLD_SIZE (as the reason says)."""
    from pynumabind import Options, planner

    topology = detect_topology()
    return [
        planner.plan(
            topology,
            options=Options(rank=rank, nprocs=2, nprocs_source="LOCAL_WORLD_SIZE", **options),
        )
        for rank in (0, 1)
    ]


def test_torchrun_workers_bind_as_planned_with_per_rank_cpus(tmp_path) -> None:
    reports = _torchrun(
        tmp_path, {"PYNUMABIND_CPUS": "0;1", "PYNUMABIND_POLICY": "bind"}, start=WARM_START
    )
    expected = _expected_plans(cpus="0;1", policy="bind")
    for report, plan in zip(reports, expected):
        rank = report["local_rank"]
        assert report["binding"]["plan"] == plan.to_dict()
        assert report["cpus"] == str(rank)  # rank 0 -> CPU 0, rank 1 -> CPU 1
        # Every thread: torch's pool started before the bind, gloo's after it.
        assert report["task_cpus"] == [str(rank)]
        assert report["threads_before"] >= 2
        bound = [t for t in report["binding"]["threads"] if t["action"] == "bound"]
        assert len(bound) >= report["threads_before"]
        assert report["policy"] == ["MPOL_BIND", sorted(plan.mems)]
        assert report["verify"]["ok"] is True, report["verify"]
        assert report["binding"]["partial"] is False
    assert {r["all_reduce"] for r in reports} == {1.0}


def test_torchrun_workers_bind_with_defaults(tmp_path) -> None:
    reports = _torchrun(tmp_path, {"PYNUMABIND_MODE": "exclusive"})
    expected = _expected_plans(mode="exclusive")
    seen = set()
    for report, plan in zip(reports, expected):
        assert report["binding"]["plan"] == plan.to_dict()
        assert plan.cpus is not None
        cpus = report["binding"]["cpus"]
        assert report["binding"]["plan"]["cpus"] == cpus
        assert report["task_cpus"] == [cpus]
        assert report["policy"][0] == "MPOL_PREFERRED"
        assert report["verify"]["ok"] is True, report["verify"]
        seen.add(cpus)
    assert len(seen) == 2  # exclusive: disjoint CPUs per rank
