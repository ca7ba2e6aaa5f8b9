"""pynumabind.integrations.sglang against the real SGLang from PyPI.

Real here: SGLang's plugin loader (``load_plugins`` discovering the installed
``sglang.srt.plugins`` entry point), its ``HookRegistry`` applying the hook,
its own "would SGLang bind?" answer, and a real ``sgl.Engine(device="cpu",
tp_size=2)`` launch in a subprocess: the main process starts two scheduler
processes (gpu_id 0 and 1), each loads the plugins and configures itself,
and pynumabind binds it.  What needs a GPU: building the scheduler's model
runner, where the launch fails here; SGLang then kills its own process tree,
hence the subprocess.  A test-only plugin (``sglang_probe``, found by the
same loader) parks each scheduler just before that point so the binding is
read from outside through /proc.  The machine is a two-node snapshot over
this machine's CPUs 0 and 1 (``PYNUMABIND_TOPOLOGY``): the one stand-in.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator

import pytest

from ..support.recipes import observe
from .helpers import HERE, ParkedLaunch, require, require_two_cpus, run_forked

pytestmark = pytest.mark.integration


require("sglang", "sglang")

from pynumabind.integrations.sglang import TESTED  # noqa: E402 - after the skip above

OLDEST, NEWEST = (".".join(map(str, end)) for end in TESTED)
RANGE = f"({OLDEST} to {NEWEST})"


def test_tested_version_passes_without_a_word(caplog) -> None:
    from pynumabind.integrations.sglang import check_version

    assert TESTED == ((0, 5, 22), (0, 5, 23))  # the range .ci/install-frameworks installs
    with caplog.at_level(logging.WARNING):
        for version in (OLDEST, NEWEST, f"{NEWEST}.post1", f"{OLDEST}.post2"):
            check_version(version)
    assert caplog.records == []


@pytest.mark.parametrize("version", ["0.5.21", "0.5.30", "0.6.0", "x"])
def test_untested_version_with_every_hook_warns_once(version: str, caplog) -> None:
    from pynumabind.integrations.sglang import check_version, missing_hooks

    assert missing_hooks() == []  # the installed SGLang has them all
    with caplog.at_level(logging.WARNING):
        check_version(version)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"SGLang {version} is outside the range" in warnings[0]
    assert RANGE in warnings[0]


WITHOUT_A_HOOK = """
    import importlib.metadata as md
    real = md.version
    md.version = lambda name: "0.6.0" if name == "sglang" else real(name)
    import sglang.srt.utils.numa_utils as numa_utils
    del numa_utils.get_numa_node_if_available
    try:
        import pynumabind.integrations.sglang
    except Exception as exc:
        print(type(exc).__name__, exc)
"""


def test_untested_version_without_a_hook_is_refused_naming_it(probes) -> None:
    result = probes["without a hook"]
    assert "ConfigError" in result.stdout, result.stdout + result.stderr[-3000:]
    assert f"SGLang 0.6.0 is outside the tested range {RANGE}" in result.stdout
    assert "sglang.srt.utils.numa_utils.get_numa_node_if_available" in result.stdout


def test_entry_point_is_discovered_by_sglang() -> None:
    from importlib.metadata import entry_points

    from sglang.srt.plugins import GENERAL_PLUGINS_GROUP

    found = {ep.name: ep.value for ep in entry_points(group=GENERAL_PLUGINS_GROUP)}
    assert found.get("pynumabind") == "pynumabind.integrations:sglang_plugin"


PROBE_HOOKS = """
    import json
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry
    from pynumabind.integrations.sglang import TARGET
    load_plugins()
    import sglang.srt.managers.scheduler as scheduler
    hooks = [h.__qualname__ for _, h, _ in HookRegistry._hooks.get(TARGET, [])]
    print(json.dumps({"hooks": hooks, "patched": TARGET in HookRegistry._patched}))
"""


# The host KV pool recipe of docs/site/placement.md, run as written but for its GPU: node 0
# stands for torch.cuda.current_device()'s node (no GPU here).  SGLang's own
# alloc_with_host_register then allocates through it; pin_memory=False stops it short of
# cudaHostRegister, the GPU boundary.  Read back: the range's policy and where its pages are.
HOST_POOL = """
    import json, re
    from pathlib import Path
    import torch
    text = Path(PLACEMENT).read_text(encoding="utf-8")
    found = re.findall(r"```python\\n(.*?)```", text, re.S)
    blocks = [b for b in found if "HostTensorAllocator" in b]
    assert len(blocks) == 1, len(blocks)
    assert blocks[0].count("gpu=torch.cuda.current_device()") == 1
    exec(blocks[0].replace("gpu=torch.cuda.current_device()", "node=0"), {"__name__": "recipe"})
    from sglang.srt.mem_cache.pool_host import common
    from pynumabind._os import libnuma
    dims = (64, 2, 4096)
    pool = common.alloc_with_host_register(
        dims, torch.bfloat16, "cpu", False, common.HostTensorAllocator()
    )
    pool[1, 1, 7] = 3.5
    start, size = pool.data_ptr(), pool.numel() * pool.element_size()
    _, status = libnuma.move_pages_status(list(range(start, start + size, 4096)))
    print(json.dumps({
        "shape": list(pool.shape),
        "dtype": str(pool.dtype),
        "value": float(pool[1, 1, 7]),
        "policy": libnuma.address_policy(start).kernel_policy,
        "nodes": sorted(set(status)),
        "pages": len(status),
    }))
""".replace("PLACEMENT", repr(str(HERE.parents[1] / "docs" / "site" / "placement.md")))


# Each probe needs a process in which SGLang's plugin loader has not run and
# pynumabind is not imported yet: one interpreter imports torch and SGLang's
# plugin modules once (not the scheduler, whose import applies the hooks) and
# forks per probe (run_forked), which saves a fresh interpreter's start each.
PRELUDE = """
    import torch
    import sglang.srt.plugins, sglang.srt.plugins.hook_registry, sglang.srt.utils.numa_utils
"""


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, subprocess.CompletedProcess]:
    cases = {
        "without a hook": (WITHOUT_A_HOOK, {}),
        "without opt-in": (PROBE_HOOKS, {}),
        "with opt-in": (PROBE_HOOKS, {"PYNUMABIND_SGLANG": "1"}),
        "with a bad opt-in": (PROBE_HOOKS, {"PYNUMABIND_SGLANG": "maybe"}),
        "host pool recipe": (HOST_POOL, {}),
    }
    return run_forked(tmp_path_factory.mktemp("probes"), PRELUDE, cases)


def test_the_host_pool_recipe_places_sglangs_pool_before_its_first_touch(probes) -> None:
    result = probes["host pool recipe"]
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "shape": [64, 2, 4096],
        "dtype": "torch.bfloat16",
        "value": 3.5,
        "policy": "MPOL_BIND",  # host_buffer's, set before SGLang's tensor existed
        "nodes": [0],  # every page present (prefaulted), on node 0
        "pages": 64 * 2 * 4096 * 2 // 4096,
    }


def test_plugin_changes_nothing_without_opt_in(probes) -> None:
    result = probes["without opt-in"]
    assert json.loads(result.stdout.splitlines()[-1]) == {"hooks": [], "patched": False}


def test_plugin_with_opt_in_hooks_configure_scheduler_process(probes) -> None:
    result = probes["with opt-in"]
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "hooks": ["_after_configure"],
        "patched": True,
    }


def test_plugin_with_bad_opt_in_value_is_logged_by_sglangs_loader(probes) -> None:
    # SGLang's loader catches a plugin's exception and logs it with its
    # traceback; the scheduler then runs unbound, but never silently.
    result = probes["with a bad opt-in"]
    assert json.loads(result.stdout.splitlines()[-1]) == {"hooks": [], "patched": False}
    assert "ConfigError: invalid PYNUMABIND_SGLANG='maybe'" in result.stderr


# ------------------------------------------------------- real launches


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "tiny-llama"
    code = f"from vllm_launch import make_tiny_llama; make_tiny_llama({str(path)!r})"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=HERE, timeout=300)
    return path


@pytest.fixture
def launch(tmp_path: Path, tiny_llama: Path) -> Iterator:
    require_two_cpus()
    from .sglang_probe import write_distribution

    dist = tmp_path / "probe-dist"
    write_distribution(dist)
    started = []

    def start(env: Dict[str, str], *options: str) -> ParkedLaunch:
        full = {
            "CUDA_VISIBLE_DEVICES": "0,1",
            "SGLANG_AUTO_NUMA_BIND": "0",
            # SGLang's CPU path asks for per-rank OpenMP CPUs; it applies them
            # only after the scheduler is built, i.e. after the probe looked.
            "SGLANG_CPU_OMP_THREADS_BIND": "0|1",
            **env,
        }
        script = [str(HERE / "sglang_launch.py"), str(tiny_llama), *options]
        run = ParkedLaunch(tmp_path, script, full, pythonpath=[HERE, dist])
        started.append(run)
        return run

    yield start
    for run in started:
        if run.proc.poll() is None:
            run.release(timeout=120)


@pytest.mark.slow
def test_real_launch_binds_each_scheduler_to_its_gpu_id(launch, snapshot: Path) -> None:
    run = launch({"PYNUMABIND_SGLANG": "1", "PYNUMABIND_TOPOLOGY": str(snapshot)})
    parked = run.parked("scheduler-*.json", 2)
    by_title = {record["title"]: record for record in parked}
    assert sorted(by_title) == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    seen = {title: observe(int(rec["pid"])) for title, rec in by_title.items()}
    front = observe(run.proc.pid)
    output = run.release()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    assert run.proc.returncode != 0  # the launch fails where a GPU is needed
    # gpu_id 0 -> GPU 0 (node 0: CPU 0); gpu_id 1 -> GPU 1 (node 1: CPU 1);
    # every thread; memory preferred on node 0, this machine's only memory node.
    tp0, tp1 = seen["sglang::scheduler_TP0"], seen["sglang::scheduler_TP1"]
    assert tp0.cpus == "0" and tp0.thread_cpus == ("0",)
    assert tp1.cpus == "1" and tp1.thread_cpus == ("1",)
    assert tp0.policy == tp1.policy == "prefer:0"
    assert front.cpus == "0-1" and front.policy == "default"
    # One line per scheduler in SGLang's log, with its TP prefix.
    assert "TP0] pynumabind: GPU 0 (0000:17:00.0) CPUs 0 " in output
    assert "TP1] pynumabind: GPU 1 (0000:65:00.0) CPUs 1 " in output
    # The hook's own line names the physical GPU and its UUID next to the bus id.
    assert (
        "SGLang scheduler (gpu_id 1), GPU 1 (physical 1, GPU-00000001-test-snapshot, "
        "0000:65:00.0): pynumabind:" in output
    )


@pytest.mark.slow
def test_real_launch_refuses_to_double_bind_with_sglangs_numa_node(
    launch, snapshot: Path, numactl: str
) -> None:
    # numa_node=[0, 0]: SGLang binds each scheduler itself, through a numactl
    # wrapper (SGLANG_NUMA_BIND_V2, its default).  pynumabind must refuse.
    run = launch({"PYNUMABIND_SGLANG": "1", "PYNUMABIND_TOPOLOGY": str(snapshot)}, "numa_node")
    output = run.finish()
    print(output[-30000:])  # shown by pytest when an assertion below fails
    assert run.proc.returncode != 0
    assert not list(run.dir.glob("scheduler-*.json"))  # no scheduler got further
    assert (
        "ConfigError: SGLang scheduler (gpu_id 0): PYNUMABIND_SGLANG=1 asks pynumabind to "
        "bind, but SGLang binds GPU 0's scheduler to node 0 itself (numactl wrapper, "
        "SGLANG_NUMA_BIND_V2): its numa_node server argument is set (drop --numa-node)"
    ) in output
    assert "pynumabind: GPU" not in output  # nothing was bound by pynumabind
