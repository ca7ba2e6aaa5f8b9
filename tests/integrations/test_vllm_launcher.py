"""vLLM's launching process, without vLLM: who opted in, and what pynumabind does there.

The decision (:func:`launch_action`) is pure and is tested on plain configs
shaped like vLLM's ``ParallelConfig``.  The hook around vLLM's
``configure_subprocess`` is tested against a stand-in ``vllm.utils.numa_utils``
that does what the real one does to the config (it fills
``numa_bind_nodes`` from ``--numa-bind``, and binds when ``numa_bind`` is
unset), so the order matters as it does in vLLM.  The real vLLM, through
``vllm serve``'s parser and plugin loader, is ``tests/integrations/test_vllm.py``
(run in CI, where vLLM is installed).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import types
from typing import Any, Dict, Iterator, List, Optional

import pytest

from pynumabind.errors import ConfigError
from pynumabind.integrations import _vllm_launch as launch
from pynumabind.integrations import vllm_plugin

OURS = "pynumabind.integrations.vllm.Worker"
STOCK = "vllm.v1.worker.gpu_worker.Worker"


def config(**fields: Any) -> types.SimpleNamespace:
    """A ParallelConfig's binding fields, vLLM's defaults unless given."""
    base: Dict[str, Any] = {
        "worker_cls": STOCK,
        "numa_bind": None,  # vLLM >= 0.34: unset means automatic
        "numa_bind_nodes": None,
        "numa_bind_cpus": None,
    }
    base.update(fields)
    return types.SimpleNamespace(**base)


# ------------------------------------------------------------- the decision


@pytest.mark.parametrize("numa_bind", [None, True, False])
def test_without_an_opt_in_nothing_happens(numa_bind: Optional[bool]) -> None:
    for worker_cls in (STOCK, "auto", "mypackage.workers.MyWorker", OURS + "Subclass"):
        assert launch.launch_action(config(worker_cls=worker_cls, numa_bind=numa_bind), {}) is None
    assert launch.launch_action(config(), {"PYNUMABIND_VLLM": "0"}) is None


@pytest.mark.parametrize(
    ("worker_cls", "environ", "binds", "named"),
    [
        (OURS, {}, "each worker", f"--worker-cls {OURS}"),
        (STOCK, {"PYNUMABIND_VLLM": "1"}, "EngineCore and each worker", "PYNUMABIND_VLLM=1"),
        (
            OURS,
            {"PYNUMABIND_VLLM": "yes"},
            "EngineCore and each worker",
            f"--worker-cls {OURS} and PYNUMABIND_VLLM=1",
        ),
    ],
)
def test_an_opt_in_turns_vllms_automatic_binding_off_and_says_which(
    worker_cls: str, environ: Dict[str, str], binds: str, named: str
) -> None:
    message = launch.launch_action(config(worker_cls=worker_cls), environ)
    assert message == (
        "pynumabind: vLLM's automatic NUMA binding (numa_bind unset) is off for this launch; "
        f"pynumabind binds {binds} instead ({named})"
    )
    # vLLM's binding off already (--no-numa-bind, or a second call): nothing to say.
    assert launch.launch_action(config(worker_cls=worker_cls, numa_bind=False), environ) is None


@pytest.mark.parametrize(
    ("fields", "flag"),
    [
        ({"numa_bind": True}, "--numa-bind"),
        ({"numa_bind": True, "numa_bind_nodes": [0, 1]}, "--numa-bind-nodes"),
        ({"numa_bind": True, "numa_bind_cpus": ["0-3", "4-7"]}, "--numa-bind-cpus"),
        ({"numa_bind_nodes": [0, 1]}, "--numa-bind-nodes"),  # vLLM 0.34: implies --numa-bind
    ],
)
def test_an_explicit_vllm_flag_with_the_worker_class_is_refused_naming_it(
    fields: Dict[str, Any], flag: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        launch.launch_action(config(worker_cls=OURS, **fields), {})
    also = "" if flag == "--numa-bind" else " (and --numa-bind)"
    assert str(caught.value) == (
        f"vLLM launch: vLLM's own NUMA binding ({flag}) is on, and pynumabind was asked to "
        f"bind too (--worker-cls {OURS}); turn one off: drop {flag}{also}, or use vLLM's own "
        "worker class"
    )


def test_vllms_own_automatic_decision_is_not_a_flag() -> None:
    decided = config(worker_cls=OURS, numa_bind=True, numa_bind_nodes=[0, 0])
    decided._numa_bind_auto = True
    assert launch.vllm_binding_flag(decided) == ""
    assert launch.launch_action(decided, {}) is None  # decided already: the worker warns


def test_a_bad_opt_in_value_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"PYNUMABIND_VLLM='2'"):
        launch.launch_action(config(), {"PYNUMABIND_VLLM": "2"})


def test_a_worker_class_object_is_recognised_only_as_ours_or_a_subclass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Ours:
        pass

    class Derived(Ours):
        pass

    assert not launch.names_our_worker(Derived)  # pynumabind's vLLM module not loaded
    module = types.ModuleType("pynumabind.integrations.vllm")
    module.Worker = Ours  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynumabind.integrations.vllm", module)
    assert launch.names_our_worker(Derived) and launch.names_our_worker(Ours)
    assert not launch.names_our_worker(object) and not launch.names_our_worker(None)
    assert launch.names_our_worker(f"  {OURS} ")


# ------------------------------------------- in front of configure_subprocess


class StandIn:
    """``vllm.utils.numa_utils.configure_subprocess`` as vLLM >= 0.34 behaves on a GPU host.

    Unset ``numa_bind``: vLLM decides to bind (automatic mode).  ``numa_bind``
    on without nodes: it fills ``numa_bind_nodes`` from the topology.  Either
    way it records that it would start the process under numactl.
    """

    def __init__(self) -> None:
        self.wrapped: List[str] = []
        self.calls = 0

    @contextlib.contextmanager
    def configure_subprocess(self, vllm_config: Any, local_rank: int) -> Iterator[None]:
        self.calls += 1
        parallel = vllm_config.parallel_config
        if parallel.numa_bind is None:
            parallel.numa_bind, parallel._numa_bind_auto = True, True
        if parallel.numa_bind and parallel.numa_bind_nodes is None:
            parallel.numa_bind_nodes = [0, 1]
        if parallel.numa_bind:
            self.wrapped.append(f"numactl --cpunodebind={parallel.numa_bind_nodes[local_rank]}")
        yield


@pytest.fixture
def numa_utils(monkeypatch: pytest.MonkeyPatch) -> StandIn:
    stand_in = StandIn()
    package = types.ModuleType("vllm")
    utils = types.ModuleType("vllm.utils")
    module = types.ModuleType("vllm.utils.numa_utils")
    module.configure_subprocess = stand_in.configure_subprocess  # type: ignore[attr-defined]
    utils.numa_utils = module  # type: ignore[attr-defined]
    package.utils = utils  # type: ignore[attr-defined]
    for name, value in (
        ("vllm", package),
        ("vllm.utils", utils),
        ("vllm.utils.numa_utils", module),
    ):
        monkeypatch.setitem(sys.modules, name, value)
    monkeypatch.delenv("PYNUMABIND_VLLM", raising=False)
    stand_in.module = module  # type: ignore[attr-defined]
    return stand_in


def start_engine_core(stand_in: StandIn, vllm_config: Any) -> None:
    """What vLLM's launcher does: look the function up, and start a process inside it."""
    with stand_in.module.configure_subprocess(vllm_config, 0):  # type: ignore[attr-defined]
        pass


def test_the_plugin_off_still_checks_the_launch_and_the_worker_class_alone_turns_vllm_off(
    numa_utils: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    vllm_plugin()  # PYNUMABIND_VLLM unset: no binding hooks, only the launch check
    assert "pynumabind.integrations.vllm" not in sys.modules  # nothing heavy imported
    vllm_plugin()  # loaded again (a second plugin load): still one wrapper
    wrapped = numa_utils.module.configure_subprocess  # type: ignore[attr-defined]
    assert getattr(wrapped, "__pynumabind_wrapped__", False)
    assert not getattr(wrapped.__wrapped__, "__pynumabind_wrapped__", False)
    vllm_config = types.SimpleNamespace(parallel_config=config(worker_cls=OURS))
    with caplog.at_level(logging.INFO, logger="vllm.pynumabind"):
        start_engine_core(numa_utils, vllm_config)
        start_engine_core(numa_utils, vllm_config)  # a second engine: said once
    assert numa_utils.calls == 2 and numa_utils.wrapped == []  # vLLM started no numactl
    assert vllm_config.parallel_config.numa_bind is False
    said = [r.getMessage() for r in caplog.records if "is off for this launch" in r.getMessage()]
    assert said == [
        "pynumabind: vLLM's automatic NUMA binding (numa_bind unset) is off for this launch; "
        f"pynumabind binds each worker instead (--worker-cls {OURS})"
    ]


def test_without_an_opt_in_vllm_decides_as_if_pynumabind_were_not_installed(
    numa_utils: StandIn,
) -> None:
    vllm_plugin()
    for fields in ({}, {"numa_bind": True}):
        vllm_config = types.SimpleNamespace(parallel_config=config(**fields))
        start_engine_core(numa_utils, vllm_config)
    assert numa_utils.wrapped == ["numactl --cpunodebind=0", "numactl --cpunodebind=0"]


def test_the_refusal_comes_before_vllm_fills_the_nodes(numa_utils: StandIn) -> None:
    # vLLM fills numa_bind_nodes from --numa-bind inside configure_subprocess; the
    # check runs first, so it names --numa-bind, the flag the user gave.
    vllm_plugin()
    vllm_config = types.SimpleNamespace(parallel_config=config(worker_cls=OURS, numa_bind=True))
    with pytest.raises(ConfigError, match=r"\(--numa-bind\) is on.*drop --numa-bind, or"):
        start_engine_core(numa_utils, vllm_config)
    assert numa_utils.calls == 0 and vllm_config.parallel_config.numa_bind_nodes is None


def test_a_vllm_without_its_own_binding_gets_no_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("vllm.utils.numa_utils")
    utils = types.ModuleType("vllm.utils")
    utils.numa_utils = module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.utils", utils)
    monkeypatch.setitem(sys.modules, "vllm.utils.numa_utils", module)
    assert launch.install_launch_hook() is False
    assert not hasattr(module, "configure_subprocess")
