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
import logging
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set

import pytest

from ..support.recipes import observe
from .helpers import (
    HERE,
    ParkedLaunch,
    require,
    require_two_cpus,
    run_forked,
    two_node_snapshot,
)

pytestmark = pytest.mark.integration


require("vllm", "vllm")


def binds_by_default() -> bool:
    """vLLM >= 0.34: ``numa_bind`` unset means automatic binding."""
    try:
        from vllm.utils import numa_utils
    except ImportError:
        return False
    return hasattr(numa_utils, "_can_auto_bind")


# ------------------------------------------------------------ the class


def test_worker_class_subclasses_vllms_real_gpu_worker() -> None:
    from vllm.v1.worker.gpu_worker import Worker as VllmWorker

    from pynumabind.integrations.vllm import Worker

    assert issubclass(Worker, VllmWorker)
    assert Worker.init_device is not VllmWorker.init_device
    assert Worker.__mro__[1] is VllmWorker


@pytest.mark.parametrize("version", ["0.33.0", "0.33.7", "0.33.1rc1", "0.34.0", "0.34.2"])
def test_tested_range_passes_without_a_word(version: str, caplog) -> None:
    from pynumabind.integrations.vllm import check_version

    with caplog.at_level(logging.WARNING):
        check_version(version)
    assert caplog.records == []


@pytest.mark.parametrize("version", ["0.32.9", "0.35.0", "0.35.0rc1", "1.0", "dev"])
def test_outside_the_tested_range_warns_once_when_the_hooks_are_there(version, caplog) -> None:
    # The installed vLLM has every hook, so only the version is unknown.
    from pynumabind.integrations.vllm import check_version, missing_hooks

    assert missing_hooks() == []
    with caplog.at_level(logging.WARNING):
        check_version(version)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"vLLM {version} is outside the range" in warnings[0]
    assert "0.33 to 0.34" in warnings[0]


# The installed vLLM's version as vLLM reports it, changed in this process
# only: the module imports, with one WARNING naming the version.
UNTESTED_IMPORT = """
    import importlib.metadata as md
    real = md.version
    md.version = lambda name: "0.35.1" if name == "vllm" else real(name)
    import pynumabind.integrations.vllm
    print("IMPORTED")
"""


def test_import_of_an_untested_version_warns_and_goes_on(plain_cases) -> None:
    result = plain_cases["untested import"]
    assert "IMPORTED" in result.stdout, result.stderr[-3000:]
    assert result.stderr.count("vLLM 0.35.1 is outside the range") == 1


GPU_WORKER = "vllm.v1.worker.gpu_worker"
HOOKS = [
    ("vllm.config", "ParallelConfig", "get_local_gpu_index", None),
    ("vllm.v1.worker.gpu_worker", None, "Worker", f"{GPU_WORKER}.Worker.init_device"),
    ("vllm.utils.numa_utils", None, "configure_subprocess", None),
]


def hook_needed(module: str) -> bool:
    """vLLM < 0.34 has no automatic binding, so no configure_subprocess to hook."""
    return "numa_utils" not in module or binds_by_default()


def without_hook(module: str, owner: Optional[str], attribute: str) -> str:
    """A release without a hook the integration calls: the real module with
    that one attribute deleted in this process, and an untested version."""
    target = f"importlib.import_module({module!r})"
    if owner:
        target = f"getattr({target}, {owner!r})"
    return f"""
        import importlib, importlib.metadata as md
        real = md.version
        md.version = lambda name: "0.35.1" if name == "vllm" else real(name)
        delattr({target}, {attribute!r})
        try:
            import pynumabind.integrations.vllm
        except Exception as exc:
            print(type(exc).__name__, exc)
    """


@pytest.mark.parametrize(("module", "owner", "attribute", "named"), HOOKS)
def test_untested_version_without_a_hook_is_refused_naming_it(
    module: str, owner: str, attribute: str, named: str, plain_cases
) -> None:
    if not hook_needed(module):
        pytest.skip("this vLLM has no automatic binding, so configure_subprocess is not needed")
    removed = named or ".".join(p for p in (module, owner, attribute) if p)
    result = plain_cases[f"without {module}.{attribute}"]
    assert "ConfigError" in result.stdout, result.stdout + result.stderr[-3000:]
    assert "vLLM 0.35.1 is outside the tested range (0.33 to 0.34)" in result.stdout
    assert removed in result.stdout


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


@pytest.mark.parametrize(
    "case",
    [
        # One data-parallel rank's shard (vLLM's set_assigned_physical_gpu_ids_for_dp_rank):
        # indexed from the shard's first logical GPU, get_local_gpu_index(0).
        (1, 1, [1], "0,1", [1]),
        (2, 1, [2, 3], "0,1,2,3", [2, 3]),
        (2, 1, [7, 5], "4,5,6,7", [3, 1]),
        # The full host list (--device-ids): indexed by the logical index.
        (1, 1, [3, 2, 1, 0], "0,1,2,3", [2]),
        (2, 1, [0, 1, 2, 3], "0,1,2,3", [2, 3]),
        # The first shard: both readings agree.
        (2, 0, [1, 0], "0,1", [1, 0]),
    ],
)
def test_assigned_gpu_ids_are_read_in_their_own_space(case, monkeypatch) -> None:
    # (TP, local DP rank, assigned_physical_gpu_ids, CUDA_VISIBLE_DEVICES, expected)
    from pynumabind.integrations.vllm import engine_core_gpus, worker_gpu

    tp, dp_local, assigned, visible, expected = case
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    config = parallel_config(
        tensor_parallel_size=tp,
        data_parallel_size=dp_local + 1,
        data_parallel_rank_local=dp_local,
        distributed_executor_backend="mp",
    )
    config.assigned_physical_gpu_ids = assigned
    assert [worker_gpu(config, rank) for rank in range(tp)] == expected
    assert engine_core_gpus(config, len(visible.split(","))) == expected


def test_local_gpus_of_the_exclusive_modes_follow_device_ids(monkeypatch) -> None:
    # The GPUs a node's workers drive, which the exclusive modes slice the node among,
    # are the workers' own GPUs: with --device-ids 2,3,5,7 (vLLM's full host list) those
    # are visible GPUs 2, 3, 5, 7, not 0-3 (before: every worker but GPU 2's and 3's
    # found itself outside 0-3 and fell back to asking for PYNUMABIND_LOCAL_GPUS).
    from pynumabind.integrations.vllm import worker_gpu, worker_local_gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = parallel_config(tensor_parallel_size=4, distributed_executor_backend="mp")
    assert worker_local_gpus(config, 3) == [0, 1, 2, 3]  # no list: the logical indices
    config.assigned_physical_gpu_ids = [2, 3, 5, 7]
    workers = [worker_gpu(config, rank) for rank in range(4)]
    assert workers == [2, 3, 5, 7]
    assert all(worker_local_gpus(config, gpu) == [2, 3, 5, 7] for gpu in workers)
    assert worker_local_gpus(config, 0) is None  # not one of them
    # Visible-device order applies as it does to each worker's own GPU.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7,5,3,2")
    assert worker_local_gpus(config, 0) == [3, 2, 1, 0]
    # One data-parallel rank's shard: the other ranks' GPUs are unknown here.
    for local_dp_size in (1, 2):
        shard = parallel_config(
            tensor_parallel_size=2,
            data_parallel_size=2,
            data_parallel_size_local=local_dp_size,
            data_parallel_rank_local=1,
            distributed_executor_backend="mp",
        )
        shard.assigned_physical_gpu_ids = [2, 3]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
        assert [worker_gpu(shard, rank) for rank in range(2)] == [2, 3]
        assert worker_local_gpus(shard, 2) is None, local_dp_size


@pytest.mark.parametrize("assigned", [[0, 1, 2], [5]])
def test_assigned_gpu_ids_of_another_length_are_a_config_error(assigned, monkeypatch) -> None:
    from pynumabind import ConfigError
    from pynumabind.integrations.vllm import worker_gpu

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5")
    config = parallel_config(
        tensor_parallel_size=2,
        data_parallel_size=2,
        data_parallel_rank_local=1,
        distributed_executor_backend="mp",
    )
    config.assigned_physical_gpu_ids = assigned
    with pytest.raises(
        ConfigError,
        match=r"expected this data-parallel rank's shard \(2 entries, "
        r"for logical GPUs 2-3\) or the full list \(at least 4 entries\)",
    ):
        worker_gpu(config, 0)


# vLLM 0.34's x86 CPU platform needs this to build a config (see vllm_launch).
STAND_IN = f"""
    import sys
    sys.path.insert(0, {str(HERE)!r})
    from vllm_launch import allow_x86_cpu_platform
    allow_x86_cpu_platform()
"""

REFUSAL_PROBE = """
    import os, types
    from vllm.engine.arg_utils import EngineArgs
    from pynumabind.integrations.vllm import (
        Worker, bind_engine_core, bind_worker, resolve_auto_binding,
    )

    config = EngineArgs(
        model={model!r}, skip_tokenizer_init=True, **{options!r}
    ).create_engine_config()
    assert config.parallel_config.numa_bind is True
    # The worker object only carries the config: constructing vLLM's GPU
    # worker needs a GPU; the class is pynumabind's (worker class path) or none.
    worker = {worker}
    worker.vllm_config, worker.rank, worker.local_rank = config, 0, 0
    before = os.sched_getaffinity(0)
    for call in (
        lambda: resolve_auto_binding(config),
        lambda: bind_engine_core(config),
        lambda: bind_worker(worker),
    ):
        try:
            call()
        except Exception as exc:
            print("RAISED", type(exc).__name__, exc)
    print("UNCHANGED", os.sched_getaffinity(0) == before)
"""


EXPLICIT = [
    ({"numa_bind": True}, "--numa-bind"),
    # vLLM 0.33 wants --numa-bind with the lists; 0.34 implies it.
    ({"numa_bind": True, "numa_bind_nodes": [0]}, "--numa-bind-nodes"),
    ({"numa_bind": True, "numa_bind_cpus": ["0"]}, "--numa-bind-cpus"),
]


def has_options(options: Dict[str, object]) -> bool:
    """Whether this vLLM's EngineArgs takes every one of ``options``."""
    from vllm.engine.arg_utils import EngineArgs

    return all(hasattr(EngineArgs, option) for option in options)


@pytest.mark.parametrize(("options", "flag"), EXPLICIT)
def test_vllms_explicit_binding_is_refused_naming_the_flag(options, flag, cpu_cases) -> None:
    # A real VllmConfig built by vLLM's EngineArgs (on the CPU platform: no
    # GPU here), with the plugin's switch on.
    if not has_options(options):
        pytest.skip(f"this vLLM has no {flag}")
    result = cpu_cases[f"explicit {flag}"]
    raised = [line for line in result.stdout.splitlines() if line.startswith("RAISED")]
    assert len(raised) == 3, result.stdout + result.stderr[-3000:]
    assert raised[0].startswith("RAISED ConfigError vLLM launch:")  # before any process starts
    assert raised[1].startswith("RAISED ConfigError vLLM EngineCore")
    assert raised[2].startswith("RAISED ConfigError vLLM worker rank 0")
    for line in raised:
        assert f"vLLM's own NUMA binding ({flag}) is on" in line
        assert "(PYNUMABIND_VLLM=1)" in line
        also = "" if flag == "--numa-bind" else " (and --numa-bind)"
        assert f"drop {flag}{also}, or unset PYNUMABIND_VLLM" in line
        assert "--worker-cls" not in line
    assert "UNCHANGED True" in result.stdout  # nothing was bound


def test_refusal_in_the_worker_class_names_the_worker_class(cpu_cases) -> None:
    result = cpu_cases["refusal in the worker class"]
    raised = [line for line in result.stdout.splitlines() if line.startswith("RAISED")]
    worker_line = [line for line in raised if "vLLM worker rank 0" in line]
    assert len(worker_line) == 1, result.stdout + result.stderr[-3000:]
    assert "asked to bind too (--worker-cls pynumabind.integrations.vllm.Worker)" in worker_line[0]
    assert "drop --numa-bind, or use vLLM's own worker class" in worker_line[0]
    assert "PYNUMABIND_VLLM" not in worker_line[0]  # not the switch that is on


# numa_bind left unset: on vLLM >= 0.34 that is "automatic" (None), and the
# plugin's hook ahead of configure_subprocess makes it False, once.
AUTO_OFF = """
    import logging
    from vllm.engine.arg_utils import EngineArgs
    from pynumabind.integrations.vllm import resolve_auto_binding

    logging.basicConfig(level=logging.INFO)
    args = EngineArgs(model={model!r}, skip_tokenizer_init=True)
    config = args.create_engine_config()
    print("BEFORE", config.parallel_config.numa_bind)
    resolve_auto_binding(config)
    resolve_auto_binding(config)
    print("AFTER", config.parallel_config.numa_bind)
"""


def test_launch_turns_vllms_automatic_binding_off(cpu_cases) -> None:
    result = cpu_cases["automatic binding turned off"]
    auto = binds_by_default()
    assert f"BEFORE {None if auto else False}" in result.stdout, result.stderr[-3000:]
    assert "AFTER False" in result.stdout
    output = result.stdout + result.stderr  # vLLM's log handler writes to stdout
    said = output.count("vLLM's automatic NUMA binding (numa_bind unset) is off")
    assert said == (1 if auto else 0)


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


def test_plugin_changes_nothing_without_opt_in(plain_cases) -> None:
    result = plain_cases["hooks without opt-in"]
    assert json.loads(result.stdout.splitlines()[-1]) == {"worker": False, "executor": False}


def test_plugin_with_opt_in_wraps_stock_worker_and_executor(plain_cases) -> None:
    result = plain_cases["hooks with opt-in"]
    assert json.loads(result.stdout.splitlines()[-1]) == {"worker": True, "executor": True}


def test_plugin_with_bad_opt_in_value_is_a_config_error(plain_cases) -> None:
    result = plain_cases["hooks with a bad opt-in"]
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


# --------------------------------------------- the probes, batched
#
# Each probe above needs a process in which vLLM's plugin loader has not run
# and pynumabind is not imported yet.  Importing vLLM takes a fresh
# interpreter 10 s of CPU here, so the probes of one environment run from one
# interpreter that imports vLLM once and forks per probe (run_forked).  What
# vLLM reads as it is imported (VLLM_TARGET_DEVICE) is the batch's; a probe
# sets only PYNUMABIND_* variables.

PLAIN_PRELUDE = """
    import importlib
    import vllm.config, vllm.plugins, vllm.v1.executor.abstract, vllm.v1.worker.gpu_worker
    try:
        importlib.import_module("vllm.utils.numa_utils")
    except ImportError:  # vLLM < 0.34
        pass
"""

CPU_PRELUDE = (
    PLAIN_PRELUDE
    + """
    import vllm.engine.arg_utils, vllm.platforms
"""
)

CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def plain_cases(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, subprocess.CompletedProcess]:
    """The import-time and plugin-loader probes, in vLLM's default environment."""
    cases = {
        "untested import": (UNTESTED_IMPORT, {}),
        "hooks without opt-in": (PROBE_HOOKS, {}),
        "hooks with opt-in": (PROBE_HOOKS, {"PYNUMABIND_VLLM": "1"}),
        "hooks with a bad opt-in": (PROBE_HOOKS, {"PYNUMABIND_VLLM": "2"}),
    }
    for module, owner, attribute, _ in HOOKS:
        if hook_needed(module):
            cases[f"without {module}.{attribute}"] = (without_hook(module, owner, attribute), {})
    return run_forked(tmp_path_factory.mktemp("plain-probes"), PLAIN_PRELUDE, cases)


@pytest.fixture(scope="module")
def cpu_cases(
    tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path
) -> Dict[str, subprocess.CompletedProcess]:
    """The probes that build a real VllmConfig, on vLLM's CPU platform."""

    def refusal(options: Dict[str, object], worker: str) -> str:
        probe = REFUSAL_PROBE.format(model=str(tiny_llama), options=options, worker=worker)
        return textwrap.dedent(STAND_IN) + textwrap.dedent(probe)

    cases = {
        "refusal in the worker class": (refusal({"numa_bind": True}, "object.__new__(Worker)"), {}),
        "automatic binding turned off": (
            textwrap.dedent(STAND_IN) + textwrap.dedent(AUTO_OFF.format(model=str(tiny_llama))),
            {"PYNUMABIND_VLLM": "1"},
        ),
    }
    for options, flag in EXPLICIT:
        if has_options(options):
            probe = refusal(options, "types.SimpleNamespace()")
            cases[f"explicit {flag}"] = (probe, {"PYNUMABIND_VLLM": "1"})
    if binds_by_default() and {0, 1} <= os.sched_getaffinity(0):
        check = textwrap.dedent(AFFINITY_CHECK)
        cases["affinity constrained"] = ("import os; os.sched_setaffinity(0, {1})\n" + check, {})
        cases["affinity free"] = (check, {})
    return run_forked(tmp_path_factory.mktemp("cpu-probes"), CPU_PRELUDE, cases, CPU_ENV)


@pytest.fixture
def launch(tmp_path: Path, tiny_llama: Path) -> Iterator:
    require_two_cpus()
    started = []

    def start(
        worker_cls: str,
        env: Dict[str, str],
        flags: Sequence[str] = (),
        script: Sequence[str] = (),
        affinity: Optional[Set[int]] = None,
    ) -> ParkedLaunch:
        full = {
            "VLLM_TARGET_DEVICE": "cpu",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "VLLM_NO_USAGE_STATS": "1",
            # vLLM's CPU platform would otherwise set OpenMP placement variables
            # for the workers; keep them out so only pynumabind places anything.
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            **env,
        }
        if not script:
            script = [str(HERE / "vllm_launch.py"), str(tiny_llama), worker_cls, *flags]
        run = ParkedLaunch(tmp_path, script, full, pythonpath=[HERE], affinity=affinity)
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


def environ_of(pid: int) -> Dict[str, str]:
    """``pid``'s environment as the kernel shows it (as it was at exec)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


NUMACTL_ENV = "_VLLM_INTERNAL_NUMACTL_ARGS"  # set by vLLM for its numactl wrapper


@pytest.mark.slow
def test_real_launch_plugin_binds_engine_core_and_each_worker(launch, snapshot: Path) -> None:
    """PYNUMABIND_VLLM=1, vLLM's stock worker, TP=2: each process read from outside.

    Where the release binds by itself (vLLM >= 0.34) its decision is forced on
    too, so the same launch also checks that only pynumabind binds: vLLM's
    automatic binding is switched off in the launching process, once, and no
    process starts through vLLM's numactl wrapper.  (One launch, not two: a
    launch costs four interpreters that import vLLM.)
    """
    auto = binds_by_default()
    env = {"PYNUMABIND_VLLM": "1", "PYNUMABIND_TOPOLOGY": str(snapshot)}
    if auto:
        env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"  # what vLLM's automatic mode needs
    run = launch("vllm_probe.ProbeStockWorker", env, flags=["force_auto"] if auto else [])
    workers = {r["rank"]: r for r in run.parked("worker-*.json", 2)}
    seen = {rank: observe(rec["pid"]) for rank, rec in workers.items()}
    engine_pid = workers[0]["ppid"]
    assert workers[1]["ppid"] == engine_pid  # both started by EngineCore
    engine = observe(engine_pid)
    engine_env = environ_of(engine_pid)
    front = observe(run.proc.pid)
    output = run.release()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    assert "Unsupported device type: cpu" in output  # where a GPU is needed
    # Worker 0 drives GPU 0 (node 0: CPU 0), worker 1 GPU 1 (node 1: CPU 1);
    # every thread moved; memory preferred on node 0 for both, because this
    # machine's only memory node is 0 (the planner read that from the process).
    # (numactl's node 0 would have been CPUs 0-1 for both.)
    assert seen[0].cpus == "0" and seen[0].thread_cpus == ("0",)
    assert seen[1].cpus == "1" and seen[1].thread_cpus == ("1",)
    assert seen[0].policy == seen[1].policy == "prefer:0"
    # EngineCore: the union of its shard's GPUs (both nodes), bound before it
    # started the workers; the front-end process is left alone.
    assert engine.cpus == "0-1" and engine.policy == "prefer:0"
    assert front.cpus == "0-1" and front.policy == "default"
    # One line per bound process, in vLLM's own log.
    # Each names the GPU's visible index, physical index, UUID and bus id.
    assert (
        "local_rank 0, GPU 0 (physical 0, GPU-00000000-test-snapshot, 0000:17:00.0): "
        "pynumabind: GPU 0 (0000:17:00.0) CPUs 0 " in output
    )
    assert (
        "local_rank 1, GPU 1 (physical 1, GPU-00000001-test-snapshot, 0000:65:00.0): "
        "pynumabind: GPU 1 (0000:65:00.0) CPUs 1 " in output
    )
    assert "vLLM EngineCore (DP rank 0), GPUs 0 (physical 0, " in output
    assert "), 1 (physical 1, GPU-00000001-test-snapshot, 0000:65:00.0): pynumabind:" in output
    # No process was started through vLLM's numactl wrapper ...
    assert NUMACTL_ENV not in engine_env
    assert workers[0]["numactl"] is None and workers[1]["numactl"] is None
    assert "with numactl" not in output
    # ... and where vLLM had decided to bind, the launching process said it is off, once.
    said = output.count("vLLM's automatic NUMA binding (numa_bind unset) is off")
    assert said == (1 if auto else 0)


@pytest.mark.slow
def test_real_launch_worker_cls_with_vllm_style_node_override(launch, snapshot: Path) -> None:
    """--worker-cls without the plugin's opt-in; PYNUMABIND_NODES in vLLM's form.

    Where the release binds by itself (vLLM >= 0.34) its decision is forced on
    too.  The launch names ``vllm_probe.ProbePynumabindWorker``, a subclass
    that the launching process does not import to find out what it derives
    from: vLLM's decision stands, it wraps each worker in numactl, and each
    worker rebinds (to the override's node) and says so.  Named by its own
    path, pynumabind's worker class turns vLLM's decision off: the ``vllm
    serve`` test below.  (One launch, not two: a launch costs four
    interpreters that import vLLM.)
    """
    auto = binds_by_default()
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot), "PYNUMABIND_NODES": "1 0"}
    if auto:
        env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"  # what vLLM's automatic mode needs
    run = launch("vllm_probe.ProbePynumabindWorker", env, flags=["force_auto"] if auto else [])
    workers = {r["rank"]: r for r in run.parked("worker-*.json", 2)}
    seen = {rank: observe(rec["pid"]) for rank, rec in workers.items()}
    engine = observe(workers[0]["ppid"])
    output = run.release()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    assert "Unsupported device type: cpu" in output
    # "1 0": GPU index 0 -> node 1 (CPU 1), GPU index 1 -> node 0 (CPU 0).
    assert seen[0].cpus == "1" and seen[0].thread_cpus == ("1",)
    assert seen[1].cpus == "0" and seen[1].thread_cpus == ("0",)
    if not auto:
        # Without PYNUMABIND_VLLM=1 the plugin did nothing: EngineCore unbound.
        assert engine.cpus == "0-1" and engine.policy == "default"
        assert workers[0]["numactl"] is None and workers[1]["numactl"] is None
        return
    # vLLM did wrap the workers in numactl (its forced automatic decision) ...
    assert workers[0]["numactl"] == workers[1]["numactl"] == "--cpunodebind=0 --preferred=0"
    # ... the workers did not fail, and pynumabind's binding is the one in force.
    assert output.count("pynumabind's binding now replaces numactl's") == 2
    assert "set PYNUMABIND_VLLM=1 for the launch (or pass --no-numa-bind)" in output


# ---------------------------------------- vLLM >= 0.34's automatic binding


def require_automatic_binding() -> None:
    if not binds_by_default():
        pytest.skip("this vLLM has no automatic NUMA binding (vLLM >= 0.34 has)")


# ---------------------------------------------- mode advised, do not bind


def do_not_bind_record(path: Path) -> str:
    """This machine's advice record saying binding makes no difference (equal cells)."""
    from pynumabind.advisor import MemoryCell, MemoryMatrix, Spread
    from pynumabind.advisor.record import Advice, save_record, this_machine
    from pynumabind.advisor.rule import decide

    same = MemoryCell(Spread.of([99.0, 99.5, 100.0, 100.5, 101.0]), threads=1)
    memory = MemoryMatrix((0, 1), (0, 1), ((same, same), (same, same)))
    recommendation = decide(memory)
    assert not recommendation.bind
    advice = Advice(memory, (), "not measured (test)", None, None, recommendation)
    return save_record(advice, str(path), machine=this_machine())


@pytest.mark.slow
def test_real_launch_advised_do_not_bind_leaves_every_process_unbound(
    launch, snapshot: Path, tmp_path: Path
) -> None:
    """PYNUMABIND_MODE=advised, a record saying binding makes no difference, the plugin.

    Neither vLLM (its automatic binding, forced where the release has it) nor
    pynumabind binds EngineCore or a worker: no numactl wrapper, every CPU
    the launch had, the default memory policy; each process says why.
    """
    record = do_not_bind_record(tmp_path / "advice.json")
    auto = binds_by_default()
    run = launch(
        "vllm_probe.ProbeStockWorker",
        {
            "PYNUMABIND_VLLM": "1",
            "PYNUMABIND_MODE": "advised",
            "PYNUMABIND_ADVICE": record,
            "PYNUMABIND_TOPOLOGY": str(snapshot),
            "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        },
        flags=["force_auto"] if auto else [],
    )
    workers = {r["rank"]: r for r in run.parked("worker-*.json", 2)}
    seen = {rank: observe(rec["pid"]) for rank, rec in workers.items()}
    engine_pid = workers[0]["ppid"]
    engine = observe(engine_pid)
    engine_env = environ_of(engine_pid)
    front = observe(run.proc.pid)
    output = run.release()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    assert "Unsupported device type: cpu" in output  # where a GPU is needed
    # No numactl wrapper from vLLM ...
    assert NUMACTL_ENV not in engine_env
    assert workers[0]["numactl"] is None and workers[1]["numactl"] is None
    assert "with numactl" not in output
    if auto:
        assert output.count("vLLM's automatic NUMA binding (numa_bind unset) is off") == 1
    # ... and no binding from pynumabind: every process keeps the launch's CPUs
    # (numactl's or pynumabind's node 0 would be CPU 0) and the default policy.
    for process in (engine, seen[0], seen[1]):
        assert process.cpus == front.cpus and process.thread_cpus == (front.cpus,)
        assert process.policy == "default"
    # Each process says it was left unbound on purpose, quoting the record.
    assert output.count("left unbound on purpose (mode advised: not bound, on purpose") == 3
    assert record in output and "binding makes no measurable difference" in output


WORKER_CLS = "pynumabind.integrations.vllm.Worker"


def serve_command(model: Path, *flags: str) -> List[str]:
    """``vllm serve MODEL`` with TP=2 (EngineCore starts two worker processes)."""
    return [
        str(HERE / "vllm_serve.py"),
        "serve",
        str(model),
        "--tensor-parallel-size", "2",
        "--distributed-executor-backend", "mp",
        "--skip-tokenizer-init",
        "--enforce-eager",
        "--max-model-len", "128",
        "--api-server-count", "1",
        "--host", "127.0.0.1",
        "--port", str(free_port()),
        *flags,
    ]  # fmt: skip


@pytest.mark.slow
def test_real_vllm_serve_worker_cls_alone_turns_vllms_automatic_binding_off(
    launch, snapshot: Path, tiny_llama: Path
) -> None:
    """``vllm serve --worker-cls pynumabind.integrations.vllm.Worker``, no PYNUMABIND_VLLM.

    vLLM decides to bind by itself (forced, as in the launch tests above).
    pynumabind's plugin entry point, loaded by vLLM's plugin loader in the
    launching process, sees the worker class in the config ``vllm serve``'s
    parser built and turns vLLM's binding off before vLLM acts on it: no
    numactl wrapper, one line saying so.

    The GPU boundary here is the worker's constructor: vLLM's GPU worker
    refuses to be built without Triton, before ``init_device`` (where the
    worker class binds) runs, so on this CPU-only machine the launch is
    checked up to that boundary -- the launcher's decision, no ``numactl``
    wrapper for EngineCore or the workers, both workers constructed -- and
    the worker class's own binding is covered by the launches above.
    """
    require_automatic_binding()
    script = serve_command(tiny_llama, "--worker-cls", WORKER_CLS)
    env = {
        "PYNUMABIND_TOPOLOGY": str(snapshot),
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",  # what vLLM's automatic mode needs
        "PROBE_FORCE_AUTO": "1",
    }
    run = launch("", env, script=script)
    output = run.finish()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    # The launching process turned vLLM's automatic binding off, and said so once ...
    said = [line for line in output.splitlines() if "is off for this launch" in line]
    assert len(said) == 1, said
    assert f"pynumabind binds each worker instead (--worker-cls {WORKER_CLS})" in said[0]
    # ... so vLLM started neither EngineCore nor a worker through numactl ...
    assert "with numactl" not in output
    assert "pynumabind's binding now replaces numactl's" not in output
    # ... and both workers got as far as a CPU-only machine lets them: the GPU boundary.
    assert output.count("vLLM's model runner requires Triton") >= 2, output[-6000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--numa-bind"], "--numa-bind"),
        (["--numa-bind", "--numa-bind-nodes", "0", "1"], "--numa-bind-nodes"),
    ],
)
def test_real_vllm_serve_worker_cls_with_vllms_own_binding_is_refused_in_the_launcher(
    launch, snapshot: Path, tiny_llama: Path, flags: List[str], named: str
) -> None:
    """``--worker-cls`` with one of vLLM's binding flags: refused before any worker starts.

    The refusal names the flag the user gave.  vLLM fills ``numa_bind_nodes``
    itself from ``--numa-bind`` once it acts on it; the launching process's
    check runs before that, so ``--numa-bind`` alone is not reported as
    ``--numa-bind-nodes`` (as each worker used to).
    """
    require_automatic_binding()  # vLLM >= 0.34: its launching process decides the binding
    script = serve_command(tiny_llama, "--worker-cls", WORKER_CLS, *flags)
    run = launch("", {"PYNUMABIND_TOPOLOGY": str(snapshot)}, script=script)
    output = run.finish()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    refusals = [line for line in output.splitlines() if "ConfigError: vLLM launch:" in line]
    assert refusals, output[-6000:]
    refusal = refusals[-1]
    assert f"vLLM's own NUMA binding ({named}) is on" in refusal
    assert f"asked to bind too (--worker-cls {WORKER_CLS})" in refusal
    assert "or use vLLM's own worker class" in refusal
    if named == "--numa-bind":
        assert "--numa-bind-nodes" not in refusal
    assert run.proc.returncode != 0
    assert list(run.dir.glob("worker-*.json")) == []  # no worker was started
    assert "Unsupported device type: cpu" not in output


# ------------------------------------- a constrained process (a cpuset)

AFFINITY_CHECK = """
    import logging, os
    logging.basicConfig(level=logging.DEBUG)
    from vllm.platforms import current_platform
    from vllm.utils import numa_utils

    # This machine is neither CUDA nor multi-node: answer those two checks as a
    # GPU host would, so that vLLM's own affinity check is the one that decides.
    type(current_platform).is_cuda_alike = classmethod(lambda cls: True)
    real_isdir = os.path.isdir
    os.path.isdir = lambda p: p.endswith("/node1") or real_isdir(p)
    print("AVAILABLE", numa_utils._is_auto_numa_available(True, require_unbound_process=True))
"""


def test_vllm_skips_automatic_binding_in_a_constrained_process(cpu_cases) -> None:
    require_automatic_binding()
    require_two_cpus()
    constrained = cpu_cases["affinity constrained"]
    free = cpu_cases["affinity free"]
    assert "AVAILABLE False" in constrained.stdout, constrained.stderr[-3000:]
    assert "CPU affinity is already constrained" in constrained.stderr
    assert "CPU affinity is already constrained" not in free.stderr, free.stderr[-3000:]


@pytest.mark.slow
def test_real_launch_in_a_cpuset_vllm_starts_unbound_and_pynumabind_binds_inside_it(
    launch, tmp_path: Path
) -> None:
    """The launch confined to CPU 1 (a Slurm or Kubernetes cpuset), the worker class.

    Both GPUs are on node 1 (CPU 1) here: the cpuset holds their node's CPUs,
    as a job's allocation does.  vLLM decides by itself (its real check, no
    plugin) and starts unbound; pynumabind binds each worker inside the cpuset.
    """
    snapshot = two_node_snapshot(tmp_path / "gpus-on-node-1.json", gpu_nodes=(1, 1))
    run = launch(
        "vllm_probe.ProbePynumabindWorker",
        {"PYNUMABIND_TOPOLOGY": str(snapshot), "VLLM_WORKER_MULTIPROC_METHOD": "spawn"},
        affinity={1},
    )
    workers = {r["rank"]: r for r in run.parked("worker-*.json", 2)}
    seen = {rank: observe(rec["pid"]) for rank, rec in workers.items()}
    engine = observe(workers[0]["ppid"])
    output = run.release()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    assert "Unsupported device type: cpu" in output
    # vLLM's own binding did not run: no numactl, EngineCore left as launched.
    assert workers[0]["numactl"] is None and workers[1]["numactl"] is None
    assert "with numactl" not in output
    assert engine.cpus == "1" and engine.policy == "default"
    if binds_by_default():
        assert "Automatic NUMA binding unavailable on this host; starting unbound" in output
    # pynumabind bound each worker inside the cpuset: its CPUs, every thread,
    # and the memory policy vLLM's unbound start leaves at "default".
    for rank in (0, 1):
        assert seen[rank].cpus == "1" and seen[rank].thread_cpus == ("1",)
        assert seen[rank].policy == "prefer:0"
        assert f"local_rank {rank}, GPU {rank} (physical {rank}," in output


# ----------------------------------------------- data parallel, vllm serve


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_real_vllm_serve_data_parallel_2_binds_each_rank_to_its_shard(
    launch, snapshot: Path, tiny_llama: Path
) -> None:
    """``vllm serve --data-parallel-size 2 -tp 1`` with PYNUMABIND_VLLM=1, to the GPU step.

    On this platform (vLLM's CPU platform) vLLM gives each DP rank only its own
    shard's devices (``assigned_physical_gpu_ids``): EngineCore_DP1 sees ``[1]``
    while its logical GPU index is 1.  Each rank's EngineCore runs its one
    worker in-process (TP=1); both are read from outside through /proc.
    """
    script = [
        str(HERE / "vllm_serve.py"),
        "serve",
        str(tiny_llama),
        "--data-parallel-size", "2",
        "--tensor-parallel-size", "1",
        "--worker-cls", "vllm_probe.ProbeStockWorker",
        "--skip-tokenizer-init",
        "--enforce-eager",
        "--max-model-len", "128",
        "--api-server-count", "1",  # one front end: the processes under test are the engines
        "--host", "127.0.0.1",
        "--port", str(free_port()),
    ]  # fmt: skip
    run = launch("", {"PYNUMABIND_VLLM": "1", "PYNUMABIND_TOPOLOGY": str(snapshot)}, script=script)
    ranks = {r["dp"]: r for r in run.parked("worker-*.json", 2)}
    seen = {dp: observe(rec["pid"]) for dp, rec in ranks.items()}
    output = run.release()
    print(output[-30000:])  # shown by pytest when an assertion below fails

    assert "Unsupported device type: cpu" in output  # where a GPU is needed
    assert "IndexError" not in output
    assert sorted(ranks) == [0, 1] and ranks[0]["pid"] != ranks[1]["pid"]
    # DP rank d drives GPU d (node d: CPU d), EngineCore and worker alike.
    for dp in (0, 1):
        assert seen[dp].cpus == str(dp) and seen[dp].thread_cpus == (str(dp),), seen
        assert f"vLLM EngineCore (DP rank {dp}), GPUs {dp} (physical {dp}," in output
