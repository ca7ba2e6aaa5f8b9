"""The framework-independent parts of pynumabind.integrations (no framework needed).

These run in the default suite.  Binding happens for real, in a child
process (so this one keeps its affinity), against this kernel; the machine
is the two-node snapshot over this machine's CPUs 0 and 1.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest

from pynumabind import ConfigError
from pynumabind.discovery import resolve_topology
from pynumabind.integrations import (
    check_release,
    describe_gpus,
    gate,
    missing_attributes,
    per_gpu_override,
    release,
)

from .helpers import require_two_cpus


@pytest.mark.parametrize(
    ("value", "on"),
    [(None, False), ("", False), ("0", False), ("off", False), ("1", True), (" true ", True)],
)
def test_gate(value, on) -> None:
    env = {} if value is None else {"PYNUMABIND_VLLM": value}
    assert gate("PYNUMABIND_VLLM", env) is on


def test_gate_rejects_anything_else_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"invalid PYNUMABIND_SGLANG='2'"):
        gate("PYNUMABIND_SGLANG", {"PYNUMABIND_SGLANG": "2"})


def documented_flag_values() -> Dict[str, List[str]]:
    """The on and off values docs/site/frameworks.md gives for the on/off switches."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "site" / "frameworks.md").read_text()
    found = re.search(r"on is (.*?); off is (.*?);", " ".join(text.split()))
    assert found, "docs/site/frameworks.md no longer lists the on/off values"
    on, off = (re.findall(r"`([^`]*)`", part) for part in found.groups())
    return {"on": on, "off": off}


def test_documented_flag_values_are_the_parsers() -> None:
    from pynumabind.discovery._environ import FLAG_FALSE, FLAG_TRUE

    documented = documented_flag_values()
    assert set(documented["on"]) == FLAG_TRUE
    assert set(documented["off"]) | {""} == FLAG_FALSE  # "empty" is written as a word


@pytest.mark.parametrize("variable", ["PYNUMABIND_VLLM", "PYNUMABIND_SGLANG", "PYNUMABIND_DISABLE"])
def test_every_switch_takes_the_one_documented_set(variable: str, machine) -> None:
    documented = documented_flag_values()
    values = [(v, True) for v in documented["on"]] + [(v, False) for v in documented["off"]]
    values += [(v.upper(), on) for v, on in values] + [("", False)]
    for value, on in values:
        if variable == "PYNUMABIND_DISABLE":  # read by the core, when binding
            result = bind_in_child("bind_gpu(0, what='t')", {**machine, variable: value})
            assert result["disabled"] is on, (variable, value, result)
        else:  # read by the plugin entry points
            assert gate(variable, {variable: value}) is on, (variable, value)
    with pytest.raises(ConfigError, match=f"invalid {variable}='enable'"):
        if variable == "PYNUMABIND_DISABLE":
            from pynumabind.discovery._environ import resolve

            resolve({variable: "enable"}, need_rank=False)
        else:
            gate(variable, {variable: "enable"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),  # blank is unset, as in the core (it must not be a ConfigError)
        (" \t", None),
        ("0 0 1 1", "0 0 1 1"),  # vLLM's form: the planner's one reader splits it
        ("  0-7   8-15 ", "0-7   8-15"),
        ("0,0,1,1", "0,0,1,1"),
        ("0-1;2-3", "0-1;2-3"),
        ("1", "1"),
        ("\xa0", "\xa0"),  # not ASCII whitespace: a value, refused by the parser
    ],
)
def test_per_gpu_override(value, expected) -> None:
    env = {} if value is None else {"PYNUMABIND_NODES": value}
    assert per_gpu_override("PYNUMABIND_NODES", env) == expected


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("0.33.0", (0, 33, 0)),
        ("0.33.1rc1", (0, 33, 1)),
        ("1.2", (1, 2)),
        ("0.5.23.post1", (0, 5, 23)),
        ("dev", ()),
        ("2!1.0", (2,)),
    ],
)
def test_release(text, parts) -> None:
    assert release(text) == parts


def test_check_release_inside_the_tested_range_says_nothing(caplog) -> None:
    def never() -> list:
        raise AssertionError("the hooks are only looked at outside the tested range")

    with caplog.at_level(logging.WARNING):
        for version in ("0.33.0", "0.33.9", "0.34.0", "0.34.1rc2"):
            check_release("vLLM", version, ((0, 33), (0, 34)), "m", never)
    assert caplog.records == []


def test_check_release_outside_warns_once_when_nothing_is_missing(caplog) -> None:
    with caplog.at_level(logging.WARNING):
        check_release("vLLM", "0.35.0", ((0, 33), (0, 34)), "m", list)
    assert [r.getMessage() for r in caplog.records] == [
        "pynumabind: vLLM 0.35.0 is outside the range m tests (0.33 to 0.34); the hooks it "
        "calls are all there, so it goes on, untested with this version"
    ]


def test_check_release_outside_refuses_naming_what_is_missing() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^m: vLLM 0\.32\.0 is outside the tested range \(0\.33 to 0\.34\) and lacks what "
        r"the integration calls: a\.b, c\.d; install vLLM 0\.33 to 0\.34$",
    ):
        check_release("vLLM", "0.32.0", ((0, 33), (0, 34)), "m", lambda: ["a.b", "c.d"])


def test_missing_attributes_resolves_through_imports() -> None:
    wanted = [
        ("json", "JSONDecoder.decode"),
        ("json", "JSONDecoder.no_such"),
        ("no_such_module_here", "x"),
    ]
    assert missing_attributes(wanted) == ["json.JSONDecoder.no_such", "no_such_module_here.x"]


# ------------------------------------------------------------ topology
# (PYNUMABIND_TOPOLOGY itself is the core's: tests/discovery/test_topology_variable.py)


def test_integrations_have_no_topology_source_of_their_own(snapshot: Path) -> None:
    require_two_cpus()
    from pynumabind import integrations

    assert not hasattr(integrations, "load_topology")  # one source: discovery's
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "1"}
    topology = resolve_topology(environ=env)
    assert [g.pci_bus_id for g in topology.gpus] == ["0000:65:00.0"]
    empty = resolve_topology(environ={"PYNUMABIND_TOPOLOGY": " ", "CUDA_VISIBLE_DEVICES": ""})
    assert not any("PYNUMABIND_TOPOLOGY" in note for note in empty.notes)  # this machine


# ------------------------------------------------------------ binding


def bind_in_child(code: str, env: Dict[str, str]) -> Dict[str, object]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    full.update(env)
    script = textwrap.dedent(
        """
        import json, os
        from pynumabind import PynumabindError
        from pynumabind.integrations import bind_gpu, bind_gpus, bind_visible_gpus
        try:
            binding = {code}
        except PynumabindError as exc:
            print(json.dumps({{"error": f"{{type(exc).__name__}}: {{exc}}"}}))
        else:
            with open("/proc/self/status") as status:
                allowed = [l.split()[1] for l in status if l.startswith("Cpus_allowed_list")]
            print(json.dumps({{
                "cpus": allowed[0],
                "reasons": list(binding.plan.reasons) if binding.plan else [],
                "disabled": binding.disabled,
            }}))
        """
    ).format(code=code)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=full, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def machine(snapshot: Path) -> Dict[str, str]:
    require_two_cpus()
    return {"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "0,1"}


def test_bind_gpu_binds_to_its_node(machine) -> None:
    assert bind_in_child("bind_gpu(1, what='t')", machine)["cpus"] == "1"
    assert bind_in_child("bind_gpu(0, what='t')", machine)["cpus"] == "0"


def test_union_of_two_gpus_says_so(machine) -> None:
    result = bind_in_child("bind_gpus([0, 1], what='engine')", machine)
    assert result["cpus"] == "0-1"
    assert result["reasons"][0].startswith("GPUs 0-1: the union of their plans")
    assert result["reasons"][0].endswith("CPU nodes 0-1")
    assert any(r.startswith("GPU 1: ") for r in result["reasons"])


def test_vllm_form_overrides_are_per_gpu_index(machine) -> None:
    nodes = {**machine, "PYNUMABIND_NODES": "1 1"}
    assert bind_in_child("bind_gpu(0, what='t')", nodes)["cpus"] == "1"
    assert bind_in_child("bind_gpus([0, 1], what='t')", nodes)["cpus"] == "1"
    cpus = {**machine, "PYNUMABIND_CPUS": "1 0"}
    assert bind_in_child("bind_gpu(0, what='t')", cpus)["cpus"] == "1"


def test_override_needs_entries_only_for_the_gpu_indices_in_use(machine) -> None:
    # vLLM's rule for its own --numa-bind-nodes: one entry per GPU index in use.
    one = {**machine, "PYNUMABIND_NODES": "1"}
    assert bind_in_child("bind_gpu(0, what='t')", one)["cpus"] == "1"
    more = {**machine, "PYNUMABIND_NODES": "0 1 1"}  # entries past the visible GPUs: unused
    assert bind_in_child("bind_gpu(1, what='t')", more)["cpus"] == "1"
    cpus = {**machine, "PYNUMABIND_CPUS": "1"}
    assert bind_in_child("bind_gpu(0, what='t')", cpus)["cpus"] == "1"


def test_missing_override_entry_names_the_index_that_needs_it(machine) -> None:
    result = bind_in_child(
        "bind_gpus([0, 1], what='vLLM EngineCore')", {**machine, "PYNUMABIND_NODES": "1"}
    )
    assert result["error"] == (
        "ConfigError: vLLM EngineCore drives GPU index 1, but PYNUMABIND_NODES='1' has 1 entry "
        "(GPU indices 0-0): give an entry for every GPU index in use, index 1 included"
    )


def test_launcher_size_is_not_blamed_in_a_framework_worker(machine) -> None:
    # A launcher's LOCAL_WORLD_SIZE in a framework worker's environment is not
    # what counts the GPUs: the error must not name it.
    env = {**machine, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4", "PYNUMABIND_NODES": "0 7"}
    result = bind_in_child("bind_gpu(1, what='t')", env)
    # UnknownIdError: a PlanError (and a ConfigError) naming the node this machine lacks
    assert result["error"].startswith(
        "UnknownIdError: GPU 1 (one of the GPUs this process drives): "
        "nodes override for rank 1 names NUMA node(s) 7"
    )
    assert "LOCAL_WORLD_SIZE" not in result["error"] and "LOCAL_RANK" not in result["error"]
    assert "PYNUMABIND_NODES='0 7'" in result["error"]


def test_describe_gpus_names_physical_index_and_uuid(snapshot: Path) -> None:
    require_two_cpus()
    topology = resolve_topology(
        environ={"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "1"}
    )
    assert describe_gpus(topology, [0]) == (
        "0 (physical 1, GPU-00000001-test-snapshot, 0000:65:00.0)"
    )


def test_visible_gpus(machine) -> None:
    one = {**machine, "CUDA_VISIBLE_DEVICES": "1"}
    assert bind_in_child("bind_visible_gpus()", one)["cpus"] == "1"
    assert bind_in_child("bind_visible_gpus()", machine)["cpus"] == "0-1"
    none = bind_in_child("bind_visible_gpus(what='actor')", {**machine, "CUDA_VISIBLE_DEVICES": ""})
    assert (
        none["error"]
        == "ConfigError: actor sees no GPU (CUDA_VISIBLE_DEVICES=''); nothing to bind to"
    )


def test_gpu_index_beyond_the_visible_ones_is_an_error(machine) -> None:
    result = bind_in_child("bind_gpu(2, what='vLLM worker')", machine)
    assert result["error"] == (
        "ConfigError: vLLM worker drives GPU index 2, but this process sees 2 GPU(s) "
        "(CUDA_VISIBLE_DEVICES='0,1')"
    )


def test_disable_still_wins(machine) -> None:
    result = bind_in_child("bind_gpus([0, 1], what='t')", {**machine, "PYNUMABIND_DISABLE": "1"})
    assert result["disabled"] is True
    assert result["cpus"] == "0-1"


# ------------------------------------------------------------ mode advised


def _record(tmp_path: Path, name: str, gpus: List[object]) -> str:
    """An advice record of this machine; GPUs measured as the snapshot names them."""
    from dataclasses import replace as _replace

    from pynumabind.advisor.record import Advice, save_record, this_machine
    from pynumabind.advisor.rule import decide

    from ..support.advice_builders import matrix

    memory = matrix([[100, 99], [99, 100]])
    copies = [_replace(g, pci_bus_id=bus) for g, bus in zip(gpus, BUSES)]  # type: ignore[call-overload]
    advice = Advice(memory, tuple(copies), "test", "test", None, decide(memory, copies))
    return save_record(advice, str(tmp_path / name), machine=this_machine())


BUSES = ("0000:17:00.0", "0000:65:00.0")  # the snapshot's GPUs 0 and 1


def test_advised_hooks_bind_each_gpu_where_its_copies_were_fastest(machine, tmp_path) -> None:
    from ..support.advice_builders import gpu

    # GPU 1 reports node 1, but its copies ran 1.4x faster from node 0.
    record = _record(
        tmp_path, "moved.json", [gpu(0, 0, [50, 36], [50, 36]), gpu(1, 1, [50, 35.7], [49, 35])]
    )
    env = {**machine, "PYNUMABIND_MODE": "advised", "PYNUMABIND_ADVICE": record}
    result = bind_in_child("bind_gpu(1, what='t')", env)
    assert result["cpus"] == "0", result
    moved = [r for r in result["reasons"] if "0000:65:00.0" in r and "mode advised" in r]
    assert moved and "not node 1 which it reports: pinned H2D 1.40x" in moved[0]
    assert bind_in_child("bind_gpu(0, what='t')", env)["cpus"] == "0"


def test_advised_hooks_leave_the_process_unbound_when_the_record_says_so(machine, tmp_path) -> None:
    from ..support.advice_builders import gpu

    record = _record(
        tmp_path,
        "same.json",
        [gpu(0, 0, [28.0, 27.8], [28.1, 28.0]), gpu(1, 1, [27.9, 28], [28, 28.2])],
    )
    env = {**machine, "PYNUMABIND_MODE": "advised", "PYNUMABIND_ADVICE": record}
    for code in ("bind_gpu(1, what='t')", "bind_gpus([0, 1], what='t')", "bind_visible_gpus()"):
        result = bind_in_child(code, env)
        assert result["cpus"] == "0-1", (code, result)
        assert result["reasons"][0].startswith("mode advised: not bound, on purpose"), result
    # No record: the default plan (GPU 1's node), after one warning.
    missing = {**env, "PYNUMABIND_ADVICE": str(tmp_path / "none.json")}
    assert bind_in_child("bind_gpu(1, what='t')", missing)["cpus"] == "1"
