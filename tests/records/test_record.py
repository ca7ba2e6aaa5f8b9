"""The advice record and mode ``advised``: recorded matrices in, plans out; the file on disk.

The store is :mod:`pynumabind.records.store` (public as
:mod:`pynumabind.advisor.record`).  The matrices are the published figures
advisor/test_rule.py uses (GB200: local pinned copies ~330 GB/s against ~115
GB/s across the C2C link; MI210: ~28 GB/s from every node), saved as
records, read back and followed.  The
machine each record was measured on is a :class:`Machine` value, so
staleness is tested field by field without a second machine; the file
itself goes through the real file system.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from pynumabind.advisor.rule import decide
from pynumabind.cpulist import format_cpulist
from pynumabind.errors import AdviceRecordError, ConfigError
from pynumabind.model import CpuMode, MemoryPolicy, Topology
from pynumabind.options import Options
from pynumabind.planner import local_ranks, plan_for
from pynumabind.records import _json, store
from pynumabind.records._json import record_dict
from pynumabind.records._machine import (
    MEMORY_TOLERANCE,
    Machine,
    MachineGpu,
    MachineNode,
    machine_of,
    staleness,
)
from pynumabind.records.advice import Advice, parse_record

from ..support.advice_builders import gpu as copies
from ..support.advice_builders import matrix
from ..support.childproc import run_in_child
from ..support.cli_helpers import run as run_cli
from ..support.topology_builders import gb200_tray, gpu, make_topology
from . import child_advised

GiB = 1 << 30
KERNEL = "6.8.0-40-generic"


def advice_of(memory, gpus=()) -> Advice:  # type: ignore[no-untyped-def]
    return Advice(
        memory=memory,
        copies=tuple(gpus),
        copies_status="measured with test",
        copies_backend="test",
        firmware=None,
        recommendation=decide(memory, gpus),
    )


def two_socket(gpu1_node: int = 1) -> Topology:
    """Two sockets, GPU 0 on node 0 and GPU 1 reporting ``gpu1_node``."""
    return make_topology(
        {0: "0-7", 1: "8-15"},
        distance=lambda a, b: 10 if a == b else 21,
        gpus=[
            gpu(0, 0, bus="0000:17:00.0", model="PCI 10de:2335"),
            gpu(1, gpu1_node, bus="0000:b1:00.0", model="PCI 10de:2335"),
        ],
    )


def machine(topology: Topology, **changes: object) -> Machine:
    sizes = {n: 256 * GiB if topology.nodes[n].cpus else None for n in topology.nodes}
    found = machine_of(topology, cpu_model="Test CPU 9000", kernel=KERNEL, memory_bytes=sizes)
    return replace(found, **changes)  # type: ignore[arg-type]


def write(path: Path, advice: Advice, recorded: Machine) -> Path:
    path.write_text(json.dumps(record_dict(advice, recorded, "2026-12-03T10:00:00Z", "test")))
    return path


def resolve(
    tmp_path: Path, advice: Optional[Advice], topology: Topology, current: Machine, **given: object
) -> store.Advised:
    path = tmp_path / "advice.json"
    if advice is not None:
        write(path, advice, current)
    options = Options(mode="advised", rank=0, **given)  # type: ignore[arg-type]
    return store.resolve_advised(
        options, topology, {"PYNUMABIND_ADVICE": str(path)}, machine=current
    )


# ------------------------------------------------- recorded matrices, followed


def test_gb200_local_copies_three_times_cross_node_bind_each_gpu_to_its_node(
    tmp_path: Path,
) -> None:
    topology = gb200_tray()
    memory = matrix([[400, 400], [400, 400]])
    # As advise records them: each GPU's numa_node is the one discovery gave,
    # the CPU-less HBM node; copies measured from the two Grace nodes.
    gpus = [
        replace(copies(i, topology.gpus[i].numa_node, *([330, 115] if i < 2 else [115, 330],) * 2),
                pci_bus_id=topology.gpus[i].pci_bus_id)
        for i in range(4)
    ]  # fmt: skip
    advised = resolve(tmp_path, advice_of(memory, gpus), topology, machine(topology))
    assert advised.not_bound is None and advised.fallback is None
    assert (advised.options.mode, advised.options.policy) == (
        CpuMode.NODE,
        MemoryPolicy.PREFERRED,
    )
    # Fastest from the Grace each GPU's affinity names: nothing moves.
    assert advised.topology == topology
    for rank, node in enumerate([0, 0, 1, 1]):
        plan = advised.finish(plan_for(advised.topology, replace(advised.options, rank=rank)))
        assert plan.node == node
        assert plan.cpus == topology.nodes[node].cpus
        assert plan.policy is MemoryPolicy.PREFERRED
        assert "mode advised" in plan.reasons[0] and "measurable difference" in plan.reasons[0]


def test_mi210_copies_equal_from_every_node_do_not_bind(tmp_path: Path) -> None:
    topology = two_socket()
    memory = matrix([[100, 98], [99, 100]])
    gpus = [
        replace(copies(0, 0, [28.0, 27.8], [28.1, 28.0]), pci_bus_id="0000:17:00.0"),
        replace(copies(1, 1, [27.9, 28.0], [28.0, 28.2]), pci_bus_id="0000:b1:00.0"),
    ]
    advised = resolve(tmp_path, advice_of(memory, gpus), topology, machine(topology))
    assert advised.not_bound is not None
    assert "not bound, on purpose" in advised.not_bound
    assert "binding makes no measurable difference" in advised.not_bound
    assert str(tmp_path / "advice.json") in advised.not_bound
    plan = advised.finish(plan_for(advised.topology, advised.options))
    assert plan.cpus is None and plan.mems == frozenset()
    assert plan.policy is MemoryPolicy.NONE
    assert plan.reasons[0] == advised.not_bound


def test_gpu_fastest_from_the_node_it_does_not_report_is_bound_there(tmp_path: Path) -> None:
    # GPU 1 reports node 1 (a wrong _PXM, as on some two-socket boards), but
    # its copies run 1.4x faster with the buffer and thread on node 0.
    topology = two_socket(gpu1_node=1)
    memory = matrix([[100, 60], [60, 100]])
    gpus = [
        replace(copies(0, 0, [50, 36], [50, 36]), pci_bus_id="0000:17:00.0"),
        replace(copies(1, 1, [50, 35.7], [49, 35]), pci_bus_id="0000:b1:00.0"),
    ]
    advice = advice_of(memory, gpus)
    assert advice.recommendation.gpu(1) is not None and advice.recommendation.gpu(1).moved
    advised = resolve(tmp_path, advice, topology, machine(topology))
    assert advised.topology.gpus[1].numa_node == 0
    assert advised.topology.gpus[0] == topology.gpus[0]
    plan = advised.finish(plan_for(advised.topology, replace(advised.options, rank=1)))
    assert plan.node == 0 and plan.cpus == topology.nodes[0].cpus
    assert plan.mems == frozenset({0}) and plan.policy is MemoryPolicy.PREFERRED
    moved = [r for r in plan.reasons if "GPU 1 (0000:b1:00.0)" in r and "mode advised" in r]
    assert moved, plan.reasons
    assert "fastest from node 0, not node 1 which it reports" in moved[0]
    assert "H2D 1.40x" in moved[0] and "D2H 1.40x" in moved[0]
    # GPU 0's worker stays on its own node.
    assert plan_for(advised.topology, replace(advised.options, rank=0)).node == 0


def test_gpus_matched_by_bus_id_whatever_the_visible_order(tmp_path: Path) -> None:
    # CUDA_VISIBLE_DEVICES=1: the moved GPU is the process's GPU 0.
    full = two_socket(gpu1_node=1)
    visible = full.replace(gpus=(replace(full.gpus[1], index=0),))
    memory = matrix([[100, 60], [60, 100]])
    gpus = [
        replace(copies(0, 0, [50, 36], [50, 36]), pci_bus_id="0000:17:00.0"),
        replace(copies(1, 1, [50, 35.7], [49, 35]), pci_bus_id="0000:B1:00.0"),  # NVML's case
    ]
    advised = resolve(tmp_path, advice_of(memory, gpus), visible, machine(full))
    assert advised.topology.gpus[0].numa_node == 0


def test_memory_verdict_alone_when_no_gpu_was_measured(tmp_path: Path) -> None:
    topology = make_topology({0: "0-3", 1: "4-7"})
    advised = resolve(
        tmp_path, advice_of(matrix([[100, 50], [50, 100]])), topology, machine(topology)
    )
    assert (advised.options.mode, advised.options.policy) == (
        CpuMode.NODE,
        MemoryPolicy.PREFERRED,
    )
    plans = [plan_for(advised.topology, replace(advised.options, rank=r, nprocs=2)) for r in (0, 1)]
    assert [p.node for p in plans] == [0, 1]


def test_a_policy_given_with_mode_advised_is_refused(tmp_path: Path) -> None:
    topology = two_socket()
    with pytest.raises(ConfigError, match="takes the memory policy from the advice record"):
        resolve(tmp_path, None, topology, machine(topology), policy="bind")
    # Interleave weights come with the policy: the record's too.
    with pytest.raises(ConfigError, match=r"do not also give weights \(weights=\)"):
        resolve(tmp_path, None, topology, machine(topology), weights={0: 3, 1: 1})


def test_other_modes_pass_through_untouched() -> None:
    topology = two_socket()
    options = Options(mode="socket", rank=0)
    advised = store.resolve_advised(options, topology, {"PYNUMABIND_ADVICE": "/nonexistent"})
    assert advised.options is options and advised.topology is topology and not advised.reasons


def test_the_planner_refuses_an_unresolved_advised_mode_but_counts_ranks() -> None:
    topology = two_socket()
    with pytest.raises(ConfigError, match=r"advised.*resolve it first"):
        plan_for(topology, Options(mode="advised", rank=0))
    assert local_ranks(topology, Options(mode="advised")) == 2


# ------------------------------------------------------ no record, stale one


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def logged():  # type: ignore[no-untyped-def]
    """The WARNING messages of the store, whatever other tests did to the loggers above."""
    logger = logging.getLogger(store.__name__)
    handler, level = _Messages(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    store._WARNED.clear()
    yield lambda: list(handler.messages)
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_missing_record_warns_once_and_plans_the_default(tmp_path: Path, logged) -> None:  # type: ignore[no-untyped-def]
    topology = two_socket()
    first = resolve(tmp_path, None, topology, machine(topology))
    second = resolve(tmp_path, None, topology, machine(topology))
    warnings = logged()
    assert len(warnings) == 1, warnings
    assert str(tmp_path / "advice.json") in warnings[0]
    assert "pynumabind advise --save" in warnings[0]
    assert first.fallback == second.fallback and first.fallback is not None
    assert first.options.mode is None and first.options.cpu_mode is CpuMode.NODE
    plan = first.finish(plan_for(first.topology, first.options))
    default = plan_for(topology, Options(rank=0))
    assert (plan.cpus, plan.mems, plan.policy) == (default.cpus, default.mems, default.policy)
    assert plan.warnings[0] == first.fallback


STALE = [
    ("cpu_model", {"cpu_model": "Other CPU 1"}, "the CPU was 'Test CPU 9000'"),
    ("kernel", {"kernel": "6.9.1"}, f"the kernel was {KERNEL}, now 6.9.1"),
]


@pytest.mark.parametrize("field, changes, words", STALE)
def test_stale_scalar_fields(field: str, changes: Dict[str, object], words: str) -> None:
    recorded = machine(two_socket())
    assert staleness(recorded, recorded) == []
    differences = staleness(recorded, replace(recorded, **changes))  # type: ignore[arg-type]
    assert len(differences) == 1 and words in differences[0], differences


def _nodes(recorded: Machine, **by_id: MachineNode) -> Machine:
    return replace(recorded, nodes=tuple(by_id.get(str(n.id), n) for n in recorded.nodes))


def test_stale_when_a_node_is_added_or_removed() -> None:
    two = machine(two_socket())
    three = machine(make_topology({0: "0-7", 1: "8-15", 2: ""}, gpus=two_socket().gpus))
    assert any("node(s) 2 are new" in d for d in staleness(two, three))
    assert any("node(s) 2 no longer exist" in d for d in staleness(three, two))


def test_stale_when_a_node_loses_cpus() -> None:
    recorded = machine(two_socket())
    fewer = replace(
        recorded,
        nodes=(recorded.nodes[0], replace(recorded.nodes[1], cpus=frozenset(range(8, 12)))),
    )
    assert staleness(recorded, fewer) == ["node 1's CPUs were 8-15, now 8-11"]


def test_memory_size_compared_with_the_tolerance_for_reserved_pages() -> None:
    recorded = machine(two_socket())
    size = recorded.nodes[0].memory_bytes
    assert size is not None

    def with_node0(value: Optional[int]) -> Machine:
        return replace(
            recorded, nodes=(replace(recorded.nodes[0], memory_bytes=value), recorded.nodes[1])
        )

    reserved = int(size * (1 - MEMORY_TOLERANCE / 2))  # a few GB the kernel keeps
    assert staleness(recorded, with_node0(reserved)) == []
    assert staleness(recorded, with_node0(None)) == []  # unknown: not a difference
    dimm_out = size - 32 * GiB
    differences = staleness(recorded, with_node0(dimm_out))
    assert differences == ["node 0's memory was 256.0 GiB, now 224.0 GiB"]


def test_stale_when_slit_distances_change() -> None:
    recorded = machine(two_socket())
    changed = replace(recorded, distances=((10, 32), (32, 10)))
    (difference,) = staleness(recorded, changed)
    assert "SLIT distance from node 0 to node 1 was 21, now 32 (and 1 more)" in difference


def test_stale_when_a_gpu_is_added_removed_or_replaced() -> None:
    recorded = machine(two_socket())
    extra = MachineGpu("0000:ca:00.0", "PCI 10de:2335")
    added = replace(recorded, gpus=(*recorded.gpus, extra))
    assert staleness(recorded, added) == ["GPU 0000:ca:00.0 (PCI 10de:2335) was added"]
    assert staleness(added, recorded) == ["GPU 0000:ca:00.0 (PCI 10de:2335) was removed"]
    other = replace(
        recorded, gpus=(recorded.gpus[0], replace(recorded.gpus[1], model="PCI 10de:2330"))
    )
    assert staleness(recorded, other) == [
        "GPU 0000:b1:00.0 was a PCI 10de:2335, now a PCI 10de:2330"
    ]


def test_a_stale_record_warns_with_what_differs_and_plans_the_default(
    tmp_path: Path, logged
) -> None:  # type: ignore[no-untyped-def]
    topology = two_socket()
    path = write(
        tmp_path / "advice.json", advice_of(matrix([[100, 50], [50, 100]])), machine(topology)
    )
    advised = store.resolve_advised(
        Options(mode="advised", rank=0),
        topology,
        {"PYNUMABIND_ADVICE": str(path)},
        machine=machine(topology, kernel="6.9.1"),
    )
    assert advised.fallback is not None and advised.options.mode is None
    (warning,) = logged()
    assert str(path) in warning and "is stale" in warning
    assert f"the kernel was {KERNEL}, now 6.9.1" in warning
    assert "pynumabind advise --save" in warning


# -------------------------------------------------------------- the document


def test_the_record_is_the_json_document_plus_the_machine_and_reads_back() -> None:
    topology = two_socket(gpu1_node=1)
    gpus = [
        replace(copies(0, 0, [50, 36], [50, 36]), pci_bus_id="0000:17:00.0"),
        replace(copies(1, 1, [50, 35.7], [49, 35]), pci_bus_id="0000:b1:00.0"),
    ]
    advice = advice_of(matrix([[100, 60], [60, 100]]), gpus)
    recorded = machine(topology)
    document = record_dict(advice, recorded, "2026-12-03T10:00:00Z", "9.9")
    assert {k: v for k, v in document.items() if k in advice.to_dict()} == advice.to_dict()
    assert set(document) - set(advice.to_dict()) == {"record", "machine", "saved", "pynumabind"}
    back = parse_record(json.dumps(document), "/x/advice.json")
    assert back.advice.to_dict() == advice.to_dict()
    assert back.machine == recorded
    assert (back.saved, back.version, back.path) == (
        "2026-12-03T10:00:00Z",
        "9.9",
        "/x/advice.json",
    )
    assert staleness(back.machine, recorded) == []


BAD = [
    ("{", "is not valid JSON"),
    ("[]", "is not an advice record"),
    ('{"schema": 1, "recommendation": {}}', "is not an advice record"),
]


@pytest.mark.parametrize("text, words", BAD)
def test_a_file_that_is_not_a_record_is_a_typed_error(text: str, words: str) -> None:
    with pytest.raises(AdviceRecordError, match=words) as caught:
        parse_record(text, "/etc/x.json")
    assert "/etc/x.json" in str(caught.value)


def _good() -> Dict[str, object]:
    topology = two_socket()
    return record_dict(advice_of(matrix([[100, 50], [50, 100]])), machine(topology), "t", "v")


@pytest.mark.parametrize(
    "path, value, words",
    [
        (
            ["recommendation", "bind"],
            "yes",
            "recommendation.bind: expected true or false, not 'yes'",
        ),
        (["recommendation", "mode"], "exclusive", "recommendation.mode: expected 'node' or 'none'"),
        (["machine", "nodes", 0, "cpus"], "0-x", "machine.nodes[0].cpus: expected a CPU list"),
        (["machine", "kernel"], None, "machine.kernel is missing"),
        (["memory", "bandwidth_spread", 0, 0, "median"], float("inf"), "expected a finite number"),
        (["schema"], 99, "has schema 99"),
    ],
)
def test_a_corrupt_record_names_the_key(path: List[object], value: object, words: str) -> None:
    document = _good()
    here: object = document
    for key in path[:-1]:
        here = here[key]  # type: ignore[index]
    if value is None:
        del here[path[-1]]  # type: ignore[attr-defined]
    else:
        here[path[-1]] = value  # type: ignore[index]
    with pytest.raises(AdviceRecordError, match=re.escape(words)):
        parse_record(json.dumps(document), "/r.json")


def test_options_follow_the_recommendation() -> None:
    moved = advice_of(
        matrix([[100, 60], [60, 100]]),
        [copies(0, 0, [50, 36], [50, 36]), copies(1, 1, [50, 35.7], [49, 35])],
    )
    assert moved.recommendation.options() == Options(mode="node", policy="preferred", nodes="0,0")
    same = advice_of(matrix([[100, 50], [50, 100]]))
    assert same.recommendation.options() == Options(mode="node", policy="preferred")
    none = advice_of(matrix([[100, 98], [99, 100]]))
    assert none.recommendation.options() == Options(mode="none", policy="none")


# ------------------------------------------------------------ the path rule


def test_path_rule_variable_then_user_directory_then_system_directory(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    user = str(tmp_path / "home" / ".cache" / "pynumabind") + "/"
    assert store.SYSTEM_PATH == "/var/lib/pynumabind/"
    assert store.read_paths(env) == [user, store.SYSTEM_PATH]
    xdg = {"HOME": "/nowhere", "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert store.read_paths(xdg)[0] == str(tmp_path / "xdg" / "pynumabind") + "/"
    assert store.read_paths({**xdg, "XDG_CACHE_HOME": "relative"})[0].startswith("/nowhere/")
    given = {**env, "PYNUMABIND_ADVICE": " /srv/a.json "}
    assert store.read_paths(given) == ["/srv/a.json"]
    assert store.save_path(given) == "/srv/a.json"
    # A trailing slash is kept: it names a directory of records.
    assert store.read_paths({**env, "PYNUMABIND_ADVICE": "/srv/records/"}) == ["/srv/records/"]
    assert store.read_paths({**env, "PYNUMABIND_ADVICE": "  "}) == [user, store.SYSTEM_PATH]
    expected = store.SYSTEM_PATH if os.geteuid() == 0 else user
    assert store.save_path(env) == expected
    # The default places are directories by the rule itself, whether they exist or not.
    assert all(store.names_directory(p) for p in store.read_paths(env))


def test_a_nul_in_the_advice_variable_is_a_typed_error() -> None:
    with pytest.raises(AdviceRecordError, match=r"PYNUMABIND_ADVICE.*NUL"):
        store.read_paths({"PYNUMABIND_ADVICE": "a\0b"})


# ----------------------------------------------------------------- the file


def test_save_writes_atomically_with_mode_0644_and_loads_back(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "dir" / "advice.json"
    advice = advice_of(matrix([[100, 50], [50, 100]]))
    recorded = machine(two_socket())
    written = store.save_record(advice, str(target), machine=recorded)
    assert written == str(target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(target.parent) == ["advice.json"]  # no temporary file left
    loaded = store.load_record(str(target))
    assert type(loaded.advice) is Advice
    assert loaded.advice.to_dict() == advice.to_dict() and loaded.machine == recorded
    # A record may be overwritten by a newer one; the inode changes (rename).
    before = target.stat().st_ino
    store.save_record(advice, str(target), machine=recorded)
    assert target.stat().st_ino != before


def test_save_refuses_to_overwrite_what_is_not_a_record(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"important": true}')
    with pytest.raises(AdviceRecordError, match=r"refusing to overwrite .*config\.json"):
        store.save_record(advice_of(matrix([[1.0]])), str(config), machine=machine(two_socket()))
    assert config.read_text() == '{"important": true}'
    # In a directory, the file this machine type gets: a directory there is refused too.
    recorded = machine(two_socket())
    (tmp_path / store.record_name(recorded)).mkdir()
    with pytest.raises(AdviceRecordError, match="not a regular file"):
        store.save_record(advice_of(matrix([[1.0]])), str(tmp_path), machine=recorded)


def test_save_to_an_unwritable_place_names_the_variable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(
        AdviceRecordError, match=r"cannot write the advice record.*PYNUMABIND_ADVICE"
    ):
        store.save_record(
            advice_of(matrix([[1.0]])), str(blocker / "advice.json"), machine=machine(two_socket())
        )


def test_load_advice_refuses_a_stale_record_unless_asked(tmp_path: Path) -> None:
    path = write(tmp_path / "a.json", advice_of(matrix([[1.0]])), machine(two_socket()))
    with pytest.raises(AdviceRecordError, match="is stale"):
        store.load_advice(str(path))  # measured on two_socket, not on this machine
    advice = store.load_advice(str(path), check_machine=False)
    assert type(advice) is Advice
    with pytest.raises(AdviceRecordError, match="no advice record"):
        store.load_record(environ={"PYNUMABIND_ADVICE": str(tmp_path / "none.json")})


def test_one_advice_class_and_the_stores_public_home() -> None:
    import pynumabind
    from pynumabind import advisor
    from pynumabind.advisor import record

    # One class: what advise() returns is what a record saves and loads.
    assert pynumabind.Advice is advisor.Advice is record.Advice is Advice
    assert Advice.__mro__ == (Advice, object) and callable(Advice.save)
    assert pynumabind.load_advice is record.load_advice is store.load_advice
    # advisor.record is where users import the store's names from.
    assert set(record.__all__) == {*store.__all__, "Advice"}
    for name in store.__all__:
        assert getattr(record, name) is getattr(store, name), name


def test_this_machine_is_read_from_the_kernel() -> None:
    here = store.this_machine()
    assert here.kernel == os.uname().release
    assert here.nodes and all(n.memory_bytes for n in here.nodes)
    online = frozenset(os.sched_getaffinity(0))
    assert online <= frozenset().union(*(n.cpus for n in here.nodes))
    assert staleness(here, store.this_machine()) == []
    # The fingerprint survives its own JSON.
    document = record_dict(advice_of(matrix([[1.0]])), here, "t", "v")
    assert parse_record(json.dumps(document)).machine == here
    assert _json.RECORD_KIND == document["record"]


# ----------------------------------------------------- this machine, for real


def _records_for_this_machine(tmp_path: Path) -> Dict[str, str]:
    """A "do not bind" and a "bind" record of this machine, and a missing one."""
    here = store.this_machine()
    no = advice_of(matrix([[100, 98], [99, 100]]))
    yes = advice_of(matrix([[100, 50], [50, 100]]))
    assert (no.bind, yes.bind) == (False, True)
    return {
        "no": store.save_record(no, str(tmp_path / "no.json"), machine=here),
        "yes": store.save_record(yes, str(tmp_path / "yes.json"), machine=here),
        "missing": str(tmp_path / "missing.json"),
    }


def _exec(record: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "exec", "--rank", "0", "--mode", "advised", *extra, "--",
        "cat", "/proc/self/status", "/proc/self/numa_maps",
        env={"PYNUMABIND_ADVICE": record},
    )  # fmt: skip


def _policies(numa_maps: str) -> set[str]:
    return {line.split()[1] for line in numa_maps.splitlines() if "kernelpagesize_kB" in line}


def test_exec_rank0_advised_follows_the_record_on_this_machine(tmp_path: Path) -> None:
    records = _records_for_this_machine(tmp_path)
    node0 = sorted(store.this_machine().nodes[0].cpus)
    everything = sorted(os.sched_getaffinity(0))
    # "do not bind": the command runs with every CPU and the default policy.
    unbound = _exec(records["no"], "--json")
    assert unbound.returncode == 0, unbound.stderr
    assert f"Cpus_allowed_list:\t{format_cpulist(frozenset(everything))}" in unbound.stdout
    assert _policies(unbound.stdout) == {"default"}
    report = json.loads(unbound.stderr.strip().splitlines()[-1])
    assert report["not_bound"].startswith("mode advised: not bound, on purpose")
    assert records["no"] in report["not_bound"] and report["applied"] is False
    # "bind": node 0's CPUs, memory preferred on node 0.
    bound = _exec(records["yes"])
    assert bound.returncode == 0, bound.stderr
    assert f"Cpus_allowed_list:\t{format_cpulist(frozenset(node0))}" in bound.stdout
    assert _policies(bound.stdout) == {"prefer:0"}
    # No record: one warning naming the file and the command, then the default plan.
    missing = _exec(records["missing"])
    assert missing.returncode == 0, missing.stderr
    warned = [line for line in missing.stderr.splitlines() if "advise --save" in line]
    assert len(warned) == 1 and records["missing"] in warned[0], missing.stderr
    assert _policies(missing.stdout) == {"prefer:0"}


def test_check_and_plan_say_the_worker_was_left_unbound_on_purpose(tmp_path: Path) -> None:
    records = _records_for_this_machine(tmp_path)
    env = {"PYNUMABIND_ADVICE": records["no"], "PYNUMABIND_MODE": "advised"}
    check = run_cli("check", "--json", env=env)
    assert check.returncode == 0, check.stderr
    (worker,) = json.loads(check.stdout)["workers"]
    assert worker["ok"] and worker["planned_cpus"] == "unbound" and worker["policy"] == "none"
    assert "binding makes no measurable difference" in worker["not_bound"]
    table = run_cli("check", env=env)
    assert "Not bound, on purpose" in table.stdout and records["no"] in table.stdout
    plan = run_cli("plan", "--json", env={**env, "PYNUMABIND_ADVICE": records["yes"]})
    (rank,) = json.loads(plan.stdout)["ranks"]
    assert rank["policy"] == "preferred" and rank["mode"] == "node"
    assert rank["reasons"][0].startswith("mode advised: the advice record")


def test_bind_current_process_advised_returns_a_binding_that_says_why(tmp_path: Path) -> None:
    records = _records_for_this_machine(tmp_path)
    found, _ = run_in_child(child_advised.bind_advised, records["no"])
    assert found["not_bound"].startswith("mode advised: not bound, on purpose")
    assert found["applied"] is False and found["policy"] == "MPOL_DEFAULT"
    assert "left unbound on purpose" in found["summary"]
    found, _ = run_in_child(child_advised.bind_advised, records["yes"])
    assert found["not_bound"] is None and found["policy"] == "MPOL_PREFERRED"


def test_advise_save_refuses_a_file_that_is_not_a_record_before_measuring(tmp_path: Path) -> None:
    config = tmp_path / "settings.json"
    config.write_text('{"keep": "me"}')
    result = run_cli("advise", "--quick", "--save", str(config))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"pynumabind: error: refusing to overwrite {config}: it is not an advice record "
        '(no "record": "pynumabind advice" key); remove it or choose another path'
    ]  # one line, before any progress: nothing was measured
    assert config.read_text() == '{"keep": "me"}'
    # A directory named where a file is: refused before measuring, one line.
    blocked = f"{config}/records/"
    bad = run_cli("advise", "--quick", "--save", env={"PYNUMABIND_ADVICE": blocked})
    assert bad.returncode == 2, bad.stderr
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith(
        f"pynumabind: error: cannot write the advice record {config}/records/"
        f"{store.record_name(store.this_machine())}: {config} is not a directory; "
    )
