"""pynumabind.integrations.vllm against the real vLLM from PyPI.

Real here: vLLM's GPU worker class (subclassed), its ``ParallelConfig`` and
``EngineArgs``, its plugin loader (``load_general_plugins`` discovering the
installed entry point), and a real ``LLM(...)`` launch on CPU: front end,
EngineCore and two tensor-parallel workers, ``mp`` executor, a tiny random
Llama made here (no download).  What needs a GPU: the workers' own device
set-up inside ``init_device`` (it fails with "Unsupported device type: cpu"),
so the launch ends there; the binding under test happens before that point,
in the same call, and is read from outside each process through /proc while
the worker waits (``vllm_probe``).  The machine is a two-node snapshot over
this machine's CPUs 0 and 1 (``PYNUMABIND_TOPOLOGY``): the one stand-in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator

import pytest

from recipes import observe

from .helpers import HERE, ParkedLaunch, require, require_two_cpus, run_python

pytestmark = pytest.mark.integration


require("vllm", "vllm")


# ------------------------------------------------------------ the class


def test_worker_class_subclasses_vllms_real_gpu_worker() -> None:
    from vllm.v1.worker.gpu_worker import Worker as VllmWorker

    from pynumabind.integrations.vllm import Worker

    assert issubclass(Worker, VllmWorker)
    assert Worker.init_device is not VllmWorker.init_device
    assert Worker.__mro__[1] is VllmWorker


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("0.33.0", True),
        ("0.33.7", True),
        ("0.33.1rc1", True),
        ("0.32.9", False),
        ("0.34.0", False),
        ("0.34.0rc1", False),
        ("1.0", False),
        ("dev", False),
    ],
)
def test_supported_version_range_is_checked(version: str, ok: bool) -> None:
    from pynumabind import ConfigError
    from pynumabind.integrations.vllm import check_version

    if ok:
        check_version(version)
        return
    with pytest.raises(
        ConfigError, match=r"supports vLLM >=0\.33\.0,<0\.34\.0; vLLM .* is installed"
    ):
        check_version(version)


def test_import_outside_the_supported_range_is_a_clear_error() -> None:
    # The installed vLLM's version as vLLM reports it, changed in this
    # process only: the module must refuse at import.
    result = run_python(
        """
        import importlib.metadata as md
        real = md.version
        md.version = lambda name: "0.30.1" if name == "vllm" else real(name)
        try:
            import pynumabind.integrations.vllm
        except Exception as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert "ConfigError" in result.stdout, result.stderr[-2000:]
    assert "vLLM 0.30.1 is installed" in result.stdout


# ------------------------------------------------------- GPU index rules


def parallel_config(**options: object):
    from vllm.config import ParallelConfig

    return ParallelConfig(**options)


@pytest.mark.parametrize(
    ("tp", "pp", "dp_local", "local_rank"),
    [
        (1, 1, 0, 0),
        (2, 1, 0, 1),
        (2, 1, 1, 0),
        (2, 1, 1, 1),
        (2, 2, 1, 3),
        (1, 1, 3, 0),
        (4, 1, 1, 2),
    ],
)
def test_worker_gpu_is_vllms_formula(tp: int, pp: int, dp_local: int, local_rank: int) -> None:
    from pynumabind.integrations.vllm import worker_gpu

    config = parallel_config(
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        data_parallel_size=dp_local + 1,
        data_parallel_rank_local=dp_local,
        distributed_executor_backend="mp",
    )
    # The formula, and vLLM's own method: both must agree with ours.
    assert worker_gpu(config, local_rank) == local_rank + dp_local * tp * pp
    assert worker_gpu(config, local_rank) == config.get_local_gpu_index(local_rank)


def test_engine_core_shard_is_its_data_parallel_ranks_gpus() -> None:
    from pynumabind.integrations.vllm import engine_core_gpus

    first = parallel_config(
        tensor_parallel_size=2, data_parallel_size=2, data_parallel_rank_local=0
    )
    second = parallel_config(
        tensor_parallel_size=2, data_parallel_size=2, data_parallel_rank_local=1
    )
    assert engine_core_gpus(first, 4) == [0, 1]
    assert engine_core_gpus(second, 4) == [2, 3]
    # Fewer visible GPUs than the shard needs: clipped, as vLLM clips.
    assert engine_core_gpus(second, 3) == [2]


def test_ray_backend_worker_gpu_is_the_local_rank() -> None:
    # Under Ray each worker sees only its own GPUs: no DP offset (vLLM's rule).
    from pynumabind.integrations.vllm import engine_core_gpus, worker_gpu

    config = parallel_config(
        tensor_parallel_size=2,
        data_parallel_size=2,
        data_parallel_rank_local=1,
        distributed_executor_backend="ray",
    )
    assert worker_gpu(config, 1) == 1
    assert engine_core_gpus(config, 4) == [0, 1, 2, 3]


def test_vllms_own_numa_bind_is_refused_not_doubled(tiny_llama: Path) -> None:
    # A real VllmConfig with --numa-bind, built by vLLM's EngineArgs (on the
    # CPU platform: no GPU here); the worker object only carries it, since
    # constructing vLLM's GPU worker needs a GPU.
    result = run_python(
        f"""
        import os
        from types import SimpleNamespace
        from vllm.engine.arg_utils import EngineArgs
        from pynumabind.integrations.vllm import bind_engine_core, bind_worker

        config = EngineArgs(
            model={str(tiny_llama)!r}, skip_tokenizer_init=True, numa_bind=True
        ).create_engine_config()
        assert config.parallel_config.numa_bind is True
        before = os.sched_getaffinity(0)
        for call in (
            lambda: bind_engine_core(config),
            lambda: bind_worker(SimpleNamespace(vllm_config=config, rank=0, local_rank=0)),
        ):
            try:
                call()
            except Exception as exc:
                print("RAISED", type(exc).__name__, exc)
        print("UNCHANGED", os.sched_getaffinity(0) == before)
        """,
        {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"},
    )
    raised = [line for line in result.stdout.splitlines() if line.startswith("RAISED")]
    assert len(raised) == 2, result.stdout + result.stderr[-3000:]
    assert raised[0].startswith("RAISED ConfigError vLLM EngineCore")
    assert raised[1].startswith("RAISED ConfigError vLLM worker rank 0")
    for line in raised:
        assert "vLLM's own NUMA binding (--numa-bind) is on" in line
        assert "drop --numa-bind, or unset PYNUMABIND_VLLM" in line
    assert "UNCHANGED True" in result.stdout  # nothing was bound


# ------------------------------------------------------- plugin loader

PROBE_HOOKS = """
    import json
    from vllm.plugins import load_general_plugins
    from vllm.v1.executor.abstract import Executor
    from vllm.v1.worker.gpu_worker import Worker
    try:
        load_general_plugins()
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    else:
        print(json.dumps({
            "worker": getattr(Worker.init_device, "__pynumabind_wrapped__", False),
            "executor": getattr(Executor.__init__, "__pynumabind_wrapped__", False),
        }))
"""


def test_entry_point_is_discovered_by_vllm() -> None:
    from importlib.metadata import entry_points

    from vllm.plugins import DEFAULT_PLUGINS_GROUP

    found = {ep.name: ep.value for ep in entry_points(group=DEFAULT_PLUGINS_GROUP)}
    assert found.get("pynumabind") == "pynumabind.integrations:vllm_plugin"


def test_plugin_changes_nothing_without_opt_in() -> None:
    result = run_python(PROBE_HOOKS)
    assert json.loads(result.stdout.splitlines()[-1]) == {"worker": False, "executor": False}


def test_plugin_with_opt_in_wraps_stock_worker_and_executor() -> None:
    result = run_python(PROBE_HOOKS, {"PYNUMABIND_VLLM": "1"})
    assert json.loads(result.stdout.splitlines()[-1]) == {"worker": True, "executor": True}


def test_plugin_with_bad_opt_in_value_is_a_config_error() -> None:
    result = run_python(PROBE_HOOKS, {"PYNUMABIND_VLLM": "2"})
    error = json.loads(result.stdout.splitlines()[-1])["error"]
    assert error.startswith("ConfigError: invalid PYNUMABIND_VLLM='2'")


# ------------------------------------------------------- real launches


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "tiny-llama"
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"from vllm_launch import make_tiny_llama; make_tiny_llama({str(path)!r})",
        ],
        check=True,
        cwd=HERE,
        timeout=300,
    )
    return path


@pytest.fixture
def launch(tmp_path: Path, tiny_llama: Path) -> Iterator:
    require_two_cpus()
    started = []

    def start(worker_cls: str, env: Dict[str, str]) -> ParkedLaunch:
        full = {
            "VLLM_TARGET_DEVICE": "cpu",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "VLLM_NO_USAGE_STATS": "1",
            # vLLM's CPU platform would otherwise set OpenMP placement variables
            # for the workers; keep them out so only pynumabind places anything.
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            **env,
        }
        script = [str(HERE / "vllm_launch.py"), str(tiny_llama), worker_cls]
        run = ParkedLaunch(tmp_path, script, full, pythonpath=[HERE])
        started.append(run)
        return run

    yield start
    for run in started:
        if run.proc.poll() is None:
            (run.dir / "go").touch()
            try:
                run.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                run.kill()


@pytest.mark.slow
def test_real_launch_plugin_binds_engine_core_and_each_worker(launch, snapshot: Path) -> None:
    """PYNUMABIND_VLLM=1, vLLM's stock worker, TP=2: each process read from outside."""
    run = launch(
        "vllm_probe.ProbeStockWorker",
        {"PYNUMABIND_VLLM": "1", "PYNUMABIND_TOPOLOGY": str(snapshot)},
    )
    workers = {r["rank"]: r for r in run.parked("worker-*.json", 2)}
    seen = {rank: observe(rec["pid"]) for rank, rec in workers.items()}
    engine_pid = workers[0]["ppid"]
    assert workers[1]["ppid"] == engine_pid  # both started by EngineCore
    engine = observe(engine_pid)
    front = observe(run.proc.pid)
    output = run.release()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    assert "Unsupported device type: cpu" in output  # where a GPU is needed
    # Worker 0 drives GPU 0 (node 0: CPU 0), worker 1 GPU 1 (node 1: CPU 1);
    # every thread moved; memory preferred on node 0 for both, because this
    # machine's only memory node is 0 (the planner read that from the process).
    assert seen[0].cpus == "0" and seen[0].thread_cpus == ("0",)
    assert seen[1].cpus == "1" and seen[1].thread_cpus == ("1",)
    assert seen[0].policy == seen[1].policy == "prefer:0"
    # EngineCore: the union of its shard's GPUs (both nodes), bound before it
    # started the workers; the front-end process is left alone.
    assert engine.cpus == "0-1" and engine.policy == "prefer:0"
    assert front.cpus == "0-1" and front.policy == "default"
    # One line per bound process, in vLLM's own log.
    assert "local_rank 0: pynumabind: rank 0 device GPU 0 (0000:17:00.0) CPUs 0 " in output
    assert "local_rank 1: pynumabind: rank 1 device GPU 1 (0000:65:00.0) CPUs 1 " in output
    assert "vLLM EngineCore (DP rank 0), GPUs 0,1: pynumabind:" in output


@pytest.mark.slow
def test_real_launch_worker_cls_with_vllm_style_node_override(launch, snapshot: Path) -> None:
    """--worker-cls without the plugin's opt-in; PYNUMABIND_NODES in vLLM's form."""
    run = launch(
        "vllm_probe.ProbePynumabindWorker",
        {"PYNUMABIND_TOPOLOGY": str(snapshot), "PYNUMABIND_NODES": "1 0"},
    )
    workers = {r["rank"]: r for r in run.parked("worker-*.json", 2)}
    seen = {rank: observe(rec["pid"]) for rank, rec in workers.items()}
    engine = observe(workers[0]["ppid"])
    output = run.release()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    assert "Unsupported device type: cpu" in output
    # "1 0": GPU index 0 -> node 1 (CPU 1), GPU index 1 -> node 0 (CPU 0).
    assert seen[0].cpus == "1" and seen[0].thread_cpus == ("1",)
    assert seen[1].cpus == "0" and seen[1].thread_cpus == ("0",)
    # Without PYNUMABIND_VLLM=1 the plugin did nothing: EngineCore unbound.
    assert engine.cpus == "0-1" and engine.policy == "default"
