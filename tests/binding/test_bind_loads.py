"""What a first bind loads: only the modules it runs, not those of other commands.

A worker pays for every module its first ``bind_current_process()`` imports,
once, before it starts its real work; most of a first bind's time was once
spent there.  These tests pin down *what* is loaded, in a fresh interpreter
started with ``-S`` (no ``site``, so no ``.pth`` file preloads anything; the
site directories are put on ``PYTHONPATH`` instead, for cffi), not how long
it takes: the time is the benchmarks' business (``python -m benchmarks``).
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from ..support import child_cold
from ..support.childproc import bare_env, run_in_child

#: Modules of the package a bind in a plain mode never runs: other commands
#: (the CLI, advise, report, the integrations), the advice record (mode
#: ``advised`` only), buffer placement and ``memory_on``, verification
#: (``Binding.verify`` loads it), NVML and KFD (no GPU here), the OS readers
#: only advise and report use, weighted interleave's values and the kernel's
#: weights (a weighted policy, or ``weights`` given, only), the page census's
#: reader (``pynumabind check`` and advise), and discovery's trace (a logger
#: enabled for INFO only: ``pynumabind show -v``).
PACKAGE_NOT_NEEDED = (
    "pynumabind.cli",
    "pynumabind.advisor",
    "pynumabind.integrations",
    "pynumabind.records",
    "pynumabind.binding.placement",
    "pynumabind.binding._buffers",
    "pynumabind.binding._census",
    "pynumabind.binding._memory_on",
    "pynumabind.binding._target",
    "pynumabind.binding._verify",
    "pynumabind._os.kfd",
    "pynumabind._os.nvml",
    "pynumabind._os.meminfo",
    "pynumabind._os.cpuinfo",
    "pynumabind._os.caches",
    "pynumabind._os.hmat",
    "pynumabind._os.kernel",
    "pynumabind._os.nvidia_smi",
    "pynumabind._os.pages",
    "pynumabind._os.weights",
    "pynumabind._weights",
    "pynumabind.discovery._trace",
    "pynumabind._keywords",
)

#: Standard-library modules a bind has no use for: JSON (snapshots, records),
#: the dataclass machinery and what it pulls in, command lines and processes,
#: ``typing`` (the annotations are for type checkers: every module of the
#: bind path imports it under ``TYPE_CHECKING`` only) and ``logging`` with
#: ``traceback`` (a bind that says nothing imports neither: see
#: :class:`pynumabind._os.forksafe.Logger`).
STDLIB_NOT_NEEDED = (
    "typing",
    "logging",
    "traceback",
    "json",
    "dataclasses",
    "inspect",
    "ast",
    "argparse",
    "subprocess",
    "shlex",
    "ctypes",
    "pynvml",
    "numpy",
    "torch",
)

#: What ``import pynumabind`` alone may load of the package: its top, the
#: fork lock, and the version (everything else on first use).
IMPORT_LOADS = {"pynumabind", "pynumabind._os", "pynumabind._os.forksafe", "pynumabind._version"}


def _loaded(mode: str) -> Dict[str, Any]:
    found, _ = run_in_child(child_cold.modules_loaded_by_a_bind, mode, flags=["-S"], env=bare_env())
    return found  # type: ignore[no-any-return]


def _under(names: List[str], prefixes: tuple[str, ...]) -> List[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


@pytest.fixture(scope="module")
def node_bind() -> Dict[str, Any]:
    return _loaded("node")


def test_the_import_loads_the_package_top_only(node_bind: Dict[str, Any]) -> None:
    ours = {n for n in node_bind["import"] if n.startswith("pynumabind")}
    assert ours == IMPORT_LOADS
    assert not {"typing", "logging", "re", "threading"} & set(node_bind["import"])


def test_a_node_bind_loads_no_module_of_other_commands(node_bind: Dict[str, Any]) -> None:
    loaded = node_bind["bind"]
    assert node_bind["applied"] is True  # it really bound (and was restored)
    # The bind path itself ran, through its own modules.
    ran = {"pynumabind.binding", "pynumabind.binding._apply", "pynumabind.planner"}
    assert ran <= set(loaded)
    assert _under(loaded, PACKAGE_NOT_NEEDED) == []
    assert _under(loaded, STDLIB_NOT_NEEDED) == []
    assert "pynumabind.planner._sets" not in loaded  # cores and caches: other modes only
    if node_bind["gpus"] == 0:  # no GPU to hide or renumber: no visibility rules
        assert "pynumabind.discovery._visible" not in loaded


@pytest.mark.parametrize("mode", ["socket", "exclusive"])
def test_other_plain_modes_load_none_of_them_either(mode: str) -> None:
    loaded = _loaded(mode)["bind"]
    assert "pynumabind.planner" in loaded
    assert _under(loaded, PACKAGE_NOT_NEEDED + STDLIB_NOT_NEEDED) == []


def test_verify_loads_its_rules_on_first_use() -> None:
    found, _ = run_in_child(child_cold.modules_loaded_by_verify, env=bare_env(), flags=["-S"])
    assert found["before"] is False
    assert found["after"] is True
    assert found["ok"] is True
