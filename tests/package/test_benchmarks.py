"""The benchmark suite's pure parts, and the JSON shape of its tiniest real measurements.

No timing is asserted anywhere: numbers belong in benchmark reports.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from benchmarks import report
from benchmarks.__main__ import main as bench_main
from benchmarks.__main__ import write_results
from benchmarks.common import (
    Settings,
    Setup,
    bare_python,
    read_topology,
    run_worker,
    worker_env,
)
from benchmarks.firsttouch import run_firsttouch
from benchmarks.jitter import count_migrations
from benchmarks.machine import NodeInfo, detect_virtualization, read_nodes
from benchmarks.overhead import importtime_descendants, parse_importtime, startup_commands
from benchmarks.probe import cold_source
from benchmarks.rawbind import RawBinder
from benchmarks.scaling import run_scaling, tree_directory
from benchmarks.stats import Summary, quantile, ratio, summarize
from benchmarks.targets import TARGETS, build_rows, run_targets, verdict
from benchmarks.threads import run_threads
from benchmarks.trees import (
    SCALING_CPUS,
    build_tree,
    count_files,
    generated_machine,
    machine_shape,
)

from pynumabind.cpulist import parse_cpulist

# ------------------------------------------------------------- statistics


def test_summary_of_known_values() -> None:
    s = summarize([5, 1, 4, 2, 3], "ms")
    assert (s.n, s.median, s.q1, s.q3, s.min, s.max) == (5, 3.0, 2.0, 4.0, 1.0, 5.0)
    assert s.iqr == 2.0
    assert s.mean == 3.0
    assert math.isclose(s.stdev, statistics.stdev([1, 2, 3, 4, 5]))
    assert s.p99 is None
    assert summarize([5, 1, 4, 2, 3], "ms", tail=True).p99 == pytest.approx(4.96)


@pytest.mark.parametrize("data", [[7.0], [1, 2], [3, 1, 2, 10, 4, 4, 0.5], list(range(101))])
def test_quantiles_match_the_standard_library(data: list[float]) -> None:
    ordered = sorted(data)
    if len(ordered) >= 2:
        expected = statistics.quantiles(ordered, n=4, method="inclusive")
        got = [quantile(ordered, q) for q in (0.25, 0.5, 0.75)]
        assert got == pytest.approx(expected)
    assert quantile(ordered, 0.0) == ordered[0]
    assert quantile(ordered, 1.0) == ordered[-1]


def test_summarize_rejects_what_cannot_be_summarized() -> None:
    with pytest.raises(ValueError, match="empty"):
        summarize([], "ms")
    with pytest.raises(ValueError, match="finite"):
        summarize([1.0, float("nan")], "ms")
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)


def test_summary_round_trips_and_scales() -> None:
    s = summarize([1.0, 2.0, 4.0, 8.0], "ms", tail=True)
    assert Summary.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    us = s.scaled(1000, "us")
    assert (us.median, us.min, us.unit) == (s.median * 1000, 1000.0, "us")
    assert "ms" in s.text()
    with pytest.raises(ValueError):
        s.scaled(0, "x")


def test_ratio_of_medians_with_quartile_range() -> None:
    slow = summarize([10, 11, 12, 13, 14], "ms")
    fast = summarize([5, 5.5, 6, 6.5, 7], "ms")
    r = ratio("slow", slow, "fast", fast)
    assert r.value == pytest.approx(12 / 6)
    assert r.low == pytest.approx(11 / 6.5)
    assert r.high == pytest.approx(13 / 5.5)
    assert r.clear
    overlap = ratio("a", summarize([1, 2, 3], "ms"), "b", summarize([1.5, 2, 2.5], "ms"))
    assert not overlap.clear
    with pytest.raises(ValueError, match="cannot divide"):
        ratio("a", slow, "b", summarize([1.0], "us"))


# ----------------------------------------------------------- machine facts


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_read_nodes_from_a_sysfs_tree(tmp_path: Path) -> None:
    base = tmp_path / "devices/system/node"
    _write(base / "node0/cpulist", "0-3\n")
    _write(base / "node0/meminfo", "Node 0 MemTotal:       1024 kB\n")
    _write(base / "node1/cpulist", "4-7\n")
    _write(base / "node1/meminfo", "Node 1 MemTotal:       2048 kB\n")
    _write(base / "node2/cpulist", "\n")  # a Grace-style memory-only node
    _write(base / "node2/meminfo", "Node 2 MemTotal:       4096 kB\n")
    nodes = read_nodes(str(tmp_path))
    assert [(n.id, n.cpus, n.memory_kb) for n in nodes] == [
        (0, frozenset(range(4)), 1024),
        (1, frozenset(range(4, 8)), 2048),
        (2, frozenset(), 4096),
    ]
    _write(tmp_path / "flat/devices/system/cpu/online", "0-1\n")
    assert read_nodes(str(tmp_path / "flat")) == [NodeInfo(0, frozenset({0, 1}), None)]


CPUINFO = "processor\t: 0\nmodel name\t: {model}\nflags\t\t: fpu sse2 {extra}\n"


def _root(tmp_path: Path, model: str = "AMD EPYC", extra: str = "") -> Path:
    _write(tmp_path / "proc/cpuinfo", CPUINFO.format(model=model, extra=extra))
    return tmp_path


def test_virtualization_bare_metal(tmp_path: Path) -> None:
    virt = detect_virtualization(str(_root(tmp_path)), environ={})
    assert not virt.virtualized and not virt.emulated
    assert "bare metal" in virt.verdict


def test_virtualization_kvm_is_indicative(tmp_path: Path) -> None:
    virt = detect_virtualization(
        str(_root(tmp_path, extra="hypervisor")), cpuid_signature="KVMKVMKVM\0\0\0", environ={}
    )
    assert (virt.virtualized, virt.hypervisor, virt.emulated) == (True, "kvm", False)
    assert "indicative only" in virt.verdict
    assert virt.to_dict()["verdict"] == virt.verdict


@pytest.mark.parametrize(
    ("model", "signature", "env"),
    [
        ("QEMU TCG CPU version 2.5+", None, {}),
        ("AMD EPYC", "TCGTCGTCGTCG", {}),
        ("AMD EPYC", None, {"PYNUMABIND_IN_GUEST": "1"}),
    ],
)
def test_virtualization_tcg_means_nothing(
    tmp_path: Path, model: str, signature: str | None, env: dict[str, str]
) -> None:
    virt = detect_virtualization(
        str(_root(tmp_path, model=model, extra="hypervisor")),
        cpuid_signature=signature,
        environ=env,
    )
    assert virt.emulated and virt.hypervisor == "qemu-tcg"
    assert "mean nothing" in virt.verdict


def test_virtualization_from_dmi_and_container(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _write(root / "sys/class/dmi/id/sys_vendor", "QEMU\n")
    _write(root / ".dockerenv", "")
    virt = detect_virtualization(str(root), environ={})
    assert virt.hypervisor == "qemu" and virt.container == "docker"
    assert any("sys_vendor" in e for e in virt.evidence)


# ------------------------------------------------------- setups and ratios


def test_count_migrations() -> None:
    assert count_migrations([]) == 0
    assert count_migrations([1, 1, 1]) == 0
    assert count_migrations([0, 1, 1, 0]) == 2
    assert count_migrations([0, -1, 1]) == 1  # unknown CPUs are skipped


def test_parse_importtime() -> None:
    text = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        120 |     typing\n"
        "import time:       345 |        987 |   pynumabind\n"
        "import time:        10 |         10 | pynumabind_extra\n"
    )
    assert parse_importtime(text, "pynumabind") == 987.0
    assert parse_importtime(text, "numpy") is None


def test_startup_commands_quote_paths_for_the_shell_wrapper() -> None:
    commands = dict(startup_commands("/opt/my tools/numactl", 1, "4, 5"))
    wrapper = commands["sh -c 'exec numactl ... python -c pass'"]
    assert wrapper[:2] == ["sh", "-c"]
    words = shlex.split(wrapper[2])
    assert words[:4] == ["exec", "/opt/my tools/numactl", "--cpunodebind=1", "--membind=1"]
    assert commands["numactl true"][:3] == [
        "/opt/my tools/numactl",
        "--cpunodebind=1",
        "--membind=1",
    ]
    assert "numactl true" not in dict(startup_commands(None, 0, "0"))


# ------------------------------------------- real kernels, real worker JSON


def test_bound_worker_reports_its_binding_and_samples() -> None:
    """The tiniest real measurement, through the same worker process the suite uses."""
    cpu = max(os.sched_getaffinity(0))
    setup = Setup(name="bound", cpus=frozenset({cpu}), policy="bind", mems=frozenset({0}))
    result = run_worker(setup, {"kind": "spin", "iterations": 20, "work": 1000}, timeout=60)
    assert "error" not in result, result.get("error")
    assert result["setup"] == setup.to_dict()
    assert result["applied"] == {
        "affinity": [cpu],
        "mempolicy": "MPOL_BIND",
        "mempolicy_nodes": [0],
    }
    assert result["unit"] == "us" and len(result["samples"]) == 20
    if result["kernel"] == "C":
        assert set(result["cpus"]) == {cpu}  # the loop really ran where it was bound


# --------------------------------------------------------------- reports


def _document() -> dict[str, object]:
    from pynumabind.advisor import Advice, MemoryCell, MemoryMatrix, Spread
    from pynumabind.advisor.rule import decide
    from pynumabind.records.report import render_text

    cell = MemoryCell(Spread.of([10, 11, 12]), Spread.of([90, 100, 110]), None, 2)
    memory = MemoryMatrix((0,), (0,), ((cell,),), buffer_bytes=1 << 20)
    advice = Advice(memory, (), "torch is not installed", None, None, decide(memory))
    return {
        "schema": 1,
        "created": "2026-01-01T00:00:00Z",
        "quick": True,
        "ffi_mode": "test",
        "machine": {"cpu_model": "Test CPU", "logical_cpus": 2, "kernel": "6.x", "python": "3.x"},
        "virtualization": detect_virtualization("/nonexistent", environ={}).to_dict(),
        "topology": {"source": "sysfs", "nodes": [{"id": 0, "cpus": "0-1", "memory_kb": 1}]},
        "benchmarks": {
            "advise": {"available": True, "advice": advice.to_dict(), "text": render_text(advice)}
        },
    }


def test_markdown_shows_the_advise_report() -> None:
    text = report.render_markdown(_document())
    assert "### Memory and host<->GPU copies per NUMA node (`pynumabind advise`)" in text
    assert "node 0             11 (10.5-11.5)" in text
    assert "GPU copies: none measured: torch is not installed" in text
    assert "Recommendation: binding makes no measurable difference" in text
    assert "bare metal" in text


def test_write_and_render_round_trip(tmp_path: Path) -> None:
    paths = write_results(_document(), str(tmp_path))
    assert json.loads(Path(paths[0]).read_text())["schema"] == 1
    assert bench_main(["--render", paths[0], "--out", str(tmp_path / "rendered")]) == 0
    assert (tmp_path / "rendered/results.md").read_text() == report.render_markdown(_document())
    pytest.importorskip("matplotlib")
    assert (tmp_path / "rendered/advise.png").stat().st_size > 1000


def test_first_touch_times_each_touch_every_round_and_renders() -> None:
    """8 MiB, two rounds: the shape of the result and its section; no timing is judged."""
    data = run_firsttouch(Settings(quick=True), size=8 << 20, rounds=2)
    assert data["bytes"] == 8 << 20 and data["rounds"] == 2 and data["threads"] >= 1
    assert {name: len(v) for name, v in data["samples_ms"].items()} == {
        "plain": 2,
        "prefault": 2,
        "host_buffer": 2,
    }
    assert all(v > 0 for values in data["samples_ms"].values() for v in values)
    plain, prefault = data["summaries"]["plain"], data["summaries"]["prefault"]
    assert data["ratio"]["value"] == pytest.approx(plain["median"] / prefault["median"])
    text = report.render_markdown({"benchmarks": {"firsttouch": data}})
    assert "### First touch" in text and "Plain / prefault: ×" in text
    assert "| host_buffer end to end (+ mapping, census) |" in text


def test_importtime_descendants_are_the_deeper_lines_above() -> None:
    text = (
        "import time:       100 |        100 | site\n"
        "import time:        50 |         50 |     re._parser\n"
        "import time:       300 |        350 |   re\n"
        "import time:       900 |        900 |   typing\n"
        "import time:        40 |       1290 | pynumabind\n"
        "import time:         5 |          5 | json\n"
    )
    assert importtime_descendants(text, "pynumabind") == [
        ("typing", 900.0),
        ("re", 300.0),
        ("re._parser", 50.0),
    ]
    assert importtime_descendants(text, "json") == []
    assert importtime_descendants(text, "absent") == []


def test_cold_probe_binds_and_import_loads_neither_pynvml_nor_numpy() -> None:
    """The cold measurement's program, run for real in a bare (``-S``) interpreter."""
    python_s, env = bare_python(worker_env())
    done = subprocess.run(
        [*python_s, "-c", cold_source(0)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result) == {
        "import_s",
        "bind_s",
        "rebind_s",
        "entry",
        "loaded_before_import",
        "module_count_before_import",
        "modules_after_import",
        "modules_after_bind",
        "binding",
    }
    assert result["import_s"] > 0 and result["bind_s"] > 0 and result["rebind_s"] > 0
    assert "pynvml" not in result["modules_after_import"]
    assert "numpy" not in result["modules_after_import"]
    assert result["binding"]["plan"]["rank"] == 0
    assert result["loaded_before_import"] == []  # -S: no .pth file preloaded typing, re...


def test_cold_source_preloads_only_module_names() -> None:
    assert cold_source(3, ("json", "logging")).lstrip().startswith("import json\nimport logging\n")
    assert cold_source(3).count("bind(3)") == 2  # the first call, then again with modules loaded
    with pytest.raises(ValueError, match="not a module name"):
        cold_source(0, ("os; import evil",))


# ------------------------------------- targets, scaling, threads


def test_generated_machines_have_the_requested_shape() -> None:
    for count in SCALING_CPUS:
        desc = generated_machine(count)
        packages, per_package, smt = machine_shape(count)
        node_cpus = [parse_cpulist(n["cpus"]) for n in desc["nodes"]]
        assert len(node_cpus) == packages * per_package
        everything = frozenset().union(*node_cpus)
        assert everything == frozenset(range(count)) == parse_cpulist(desc["online_cpus"])
        assert sum(len(c) for c in node_cpus) == count  # no CPU in two nodes
        assert (desc["smt_offset"] is not None) == smt
        assert {g["numa_node"] for g in desc["gpus"]} <= {n["id"] for n in desc["nodes"]}
        assert len(desc["distances"]["matrix"]) == len(node_cpus)
    assert machine_shape(128) == (1, 2, True)  # outside the series: 64 CPUs per node
    with pytest.raises(ValueError, match="multiple of 64"):
        machine_shape(100)
    with pytest.raises(ValueError, match="at least one CPU"):
        machine_shape(0)


@pytest.mark.parametrize("count", [2, 64, 256])
def test_generated_tree_reads_back_as_generated(count: int) -> None:
    """The library's discovery of a generated tree finds the machine it was written from."""
    desc = generated_machine(count)
    with tempfile.TemporaryDirectory(dir=tree_directory()) as root:  # tmpfs: thousands of files
        build_tree(desc, root)
        topology = read_topology(root)
        files = count_files(root)
    assert sorted(topology.cpus) == list(range(count))
    assert sorted(topology.nodes) == [n["id"] for n in desc["nodes"]]
    assert [g.numa_node for g in topology.gpus] == [g["numa_node"] for g in desc["gpus"]]
    packages = {c.package for c in topology.cpus.values()}
    assert len(packages) == machine_shape(count)[0]
    assert files > count  # several files per CPU


def test_discovery_is_named_in_common_only() -> None:
    """Every benchmark reaches the discovery API through benchmarks.common (one line to move)."""
    bench_dir = Path(__file__).resolve().parents[2] / "benchmarks"
    pattern = re.compile(
        r"pynumabind\.discovery|import discovery|topology_from_sysfs|load_topology"
        r"|\bTopology\.|\.from_sysfs\(|\.detect\("
    )
    offenders = [
        f"{path.name}:{number}"
        for path in sorted(bench_dir.glob("*.py"))
        if path.name != "common.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []


def test_raw_binder_sets_what_it_is_asked() -> None:
    """The floor really binds (real kernel, real syscalls), and undoes it."""
    from pynumabind._os import libnuma as _libnuma

    original = frozenset(os.sched_getaffinity(0))
    cpu = max(original)
    for policy, kernel_policy in (
        ("bind", "MPOL_BIND"),
        ("preferred", "MPOL_PREFERRED"),
        ("interleave", "MPOL_INTERLEAVE"),
        ("local", "MPOL_LOCAL"),
    ):
        binder = RawBinder(frozenset({cpu}), frozenset({0}), policy, original)
        try:
            binder.apply()
            assert os.sched_getaffinity(0) == {cpu}
            assert _libnuma.get_mempolicy().kernel_policy == kernel_policy
        finally:
            binder.undo()
        assert os.sched_getaffinity(0) == original
        assert _libnuma.get_mempolicy().kernel_policy == "MPOL_DEFAULT"
    untouched = RawBinder(frozenset({cpu}), frozenset({0}), "none", original)
    try:
        untouched.apply()
        assert _libnuma.get_mempolicy().kernel_policy == "MPOL_DEFAULT"
    finally:
        untouched.undo()


def _samples(median: float, spread: float = 0.1) -> list[float]:
    return [median * (1 - spread), median, median * (1 + spread)]


def test_target_rows_judge_each_row_against_its_target() -> None:
    rows = {
        r["key"]: r
        for r in build_rows(
            {
                "anchor": _samples(1.0),
                "first_bind_preloaded": _samples(120.0),  # 20x the 6 ms target: missed
                "import_and_first_bind": _samples(20.0, 0.5),  # straddles 20 ms
                "import": _samples(2.0),  # fast, but see the modules below
                "second_bind": _samples(50.0),  # us; 5x of 20 us raw is the limit
                "raw": _samples(20.0),
                "exec_start": _samples(15.0),  # half of 30 ms
                # from_sysfs_dgx_h100 not measured
            },
            ["json", "dataclasses"],
            {"from_sysfs_dgx_h100": "no fixture tree"},
        )
    }
    assert set(rows) == set(TARGETS)
    assert "ratio" not in rows["anchor"] and "verdict" not in rows["anchor"]
    assert rows["first_bind_preloaded"]["verdict"] == "missed"
    assert rows["first_bind_preloaded"]["ratio"]["value"] == pytest.approx(20.0)
    assert rows["import_and_first_bind"]["verdict"] == "borderline"
    assert rows["import"]["verdict"] == "missed (loads json)"
    assert rows["import"]["forbidden_loaded"] == ["json"]
    assert rows["second_bind"]["ratio"]["value"] == pytest.approx(0.5)
    assert rows["second_bind"]["verdict"] == "met"
    assert rows["second_bind"]["summary"]["unit"] == "us"
    assert rows["exec_start"]["ratio"]["value"] == pytest.approx(0.5)
    assert rows["exec_start"]["verdict"] == "met"
    assert rows["from_sysfs_dgx_h100"]["error"] == "no fixture tree"
    # a reference that is not measured cannot judge; one that can be <= 0 judges by median only
    alone = {r["key"]: r for r in build_rows({"second_bind": [5.0]}, None)}
    assert alone["second_bind"]["verdict"] == "no raw measured: cannot judge"
    noisy = {r["key"]: r for r in build_rows({"raw": [-1.0, 1.0, 2.0], "second_bind": [0.5]}, None)}
    assert noisy["second_bind"]["verdict"] == "met (median only)"
    assert verdict(0.5, 0.8, 0.9) == "met"
    assert verdict(1.1, 1.2, 1.5) == "missed"
    assert verdict(0.9, 1.0, 1.1) == "borderline"


def test_loglog_slope() -> None:
    assert report.loglog_slope([(2.0, 4.0), (4.0, 16.0), (8.0, 64.0)]) == pytest.approx(2.0)
    assert report.loglog_slope([(64.0, 3.0), (4096.0, 3.0)]) == pytest.approx(0.0)
    assert report.loglog_slope([(64.0, 3.0)]) is None


@pytest.fixture(scope="module")
def series() -> dict[str, dict[str, object]]:
    """The three issue-14 suites, run for real at their smallest settings (once per module)."""
    settings = Settings(quick=True, install_numactl=False)
    return {
        "targets": run_targets(settings, rounds=1, inner_reps=2, warmup=False),
        "scaling": run_scaling(settings, cpus=(2, 64), reps=1),
        "threads": run_threads(settings, counts=(1, 10)),
    }


def test_targets_suite_reports_every_row(series: dict[str, Any]) -> None:
    data = series["targets"]
    rows = {r["key"]: r for r in data["rows"]}
    assert list(rows) == list(TARGETS)
    measured = [k for k in TARGETS if k != "anchor" or data["numactl"]["available"]]
    for key in measured:
        assert "error" not in rows[key], rows[key]
        assert rows[key]["summary"]["n"] >= 1
    keys = ("first_bind_preloaded", "import_and_first_bind", "import", "second_bind")
    for key in (*keys, "exec_start", "from_sysfs_dgx_h100"):
        assert rows[key]["verdict"].split()[0] in ("met", "missed", "borderline")
        assert rows[key]["ratio"]["value"] > 0
    assert rows["second_bind"]["reference"]["name"] == "raw"
    assert rows["second_bind"]["summary"]["n"] == 2  # one process, inner_reps calls
    assert data["second_bind_threads"] == 4
    assert rows["exec_start"]["summary"]["n"] == 1  # one pair per round
    assert isinstance(rows["import"]["modules_after_import"], list)
    assert data["bare_loaded_before_import"] == []
    assert data["rounds"] == 1 and data["fixture"] == "dgx_h100"


def test_scaling_suite_times_every_mode(series: dict[str, Any]) -> None:
    data = series["scaling"]
    assert data["available"] is True
    assert [m["cpus"] for m in data["machines"]] == [2, 64]
    for machine in data["machines"]:
        assert "error" not in machine, machine.get("error")
        assert machine["reps"] == 1
        assert machine["discovered"]["cpus"] == machine["cpus"]
        assert machine["discovered"]["nodes"] == machine["nodes"]
        assert set(machine["modes"]) == {"node", "socket", "exclusive", "core-complex"}
        for mode, entry in machine["modes"].items():
            assert entry["total"]["n"] == 1
            assert entry["total"]["median"] == pytest.approx(
                entry["detect"]["median"] + entry["plan"]["median"]
            )
            assert entry["plan_result"]["cpu_count"] >= 1, mode
    big = data["machines"][1]["modes"]
    # the 64-CPU machine: node/socket take a whole node, the exclusive modes a slice of it
    assert big["node"]["plan_result"]["cpu_count"] == 32
    assert big["exclusive"]["plan_result"]["cpu_count"] < 32


def test_threads_suite_compares_with_the_floor(series: dict[str, Any]) -> None:
    runs = series["threads"]["runs"]
    assert [r["requested"] for r in runs] == [1, 10]
    for run in runs:
        assert "error" not in run, run.get("error")
        assert run["threads"] == run["requested"]
        assert run["apply"]["n"] == run["reps"] == run["raw"]["n"]
        assert run["ratio"]["numerator"] == "apply_plan"


def test_issue14_sections_render(series: dict[str, Any], tmp_path: Path) -> None:
    document = {**_document(), "benchmarks": dict(series)}
    text = report.render_markdown(document)
    assert "### Discovery and binding cost against a numactl exec" in text
    for what, _target, _limit, _unit in TARGETS.values():
        assert what in text
    assert re.search(
        r"\| 64 \| 2 pkg, 2 node\(s\), SMT, 8 GPU\(s\), 16 PCI fn \| \d+ \| 1 \|", text
    )
    assert "### Apply time against the number of threads" in text
    pytest.importorskip("matplotlib")
    written = report.render_plots(document, str(tmp_path))
    assert {Path(p).name for p in written} >= {"scaling.png", "threads.png"}
    assert (tmp_path / "scaling.png").stat().st_size > 1000


# ------------------------------------------------- the GPU machine script


def test_gpu_advise_script_writes_its_files_without_a_gpu(tmp_path: Path) -> None:
    """No GPU here: the script still writes JSON and Markdown that say why, and exits 1."""
    from benchmarks import gpu_advise

    assert gpu_advise.main(["--quick", "--out", str(tmp_path)]) == 1
    results = json.loads((tmp_path / "gpu-advise.json").read_text())
    assert results["copy_benchmark"]["measured"] is False
    assert results["advise"]["memory"]["cpu_nodes"] == [0]
    assert "errors" not in results, results.get("errors")
    text = (tmp_path / "gpu-advise.md").read_text()
    assert "Copy benchmark: not run: CUDA is not usable from this process" in text
    assert "Recommendation: binding makes no measurable difference" in text


def test_gpu_advise_markdown_tables_a_measured_copy_benchmark() -> None:
    from benchmarks import gpu_advise

    gpu = {
        "index": 0,
        "name": "GB200",
        "numa_node": 0,
        "cpu_nodes": [0, 1],
        "h2d_gbs": [330.0, 115.0],
        "d2h_gbs": [320.0, None],
        "placement": [{"fraction": 1.0}, None],
    }
    results = {
        "created": "2026-01-01T00:00:00Z",
        "pynumabind": "0.1.0",
        "copy_benchmark": {
            "measured": True,
            "backend": "torch",
            "runs": [{"size_mib": 64, "gpus": [gpu]}],
        },
        "errors": {"nvidia-smi": "TimeoutExpired"},
    }
    text = gpu_advise.markdown(results)
    assert "| 64 MiB | 0 GB200 | 0 | 0 | 330 | 320 | 100% on node 0 |" in text
    assert "| 64 MiB | 0 GB200 | 0 | 1 | 115 | - | - |" in text
    assert "- step `nvidia-smi` failed: TimeoutExpired" in text


# ------------------------------------------------------------ stale bytecode


def test_bytecode_state_names_the_modules_a_fresh_process_would_compile(tmp_path: Path) -> None:
    import py_compile

    from benchmarks.machine import bytecode_state

    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("a.py", "b.py", "sub/c.py", "sub/d.py"):
        (package / name).write_text("x = 1\n", encoding="utf-8")
    py_compile.compile(str(package / "a.py"), doraise=True)
    py_compile.compile(
        str(package / "sub/c.py"),
        doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
    )
    py_compile.compile(str(package / "sub/d.py"), doraise=True)
    (package / "sub/d.py").write_text("x = 22\n", encoding="utf-8")  # changed after: stale
    state = bytecode_state(str(package))
    assert state["modules"] == 4
    assert state["stale"] == ["b.py", os.path.join("sub", "d.py")]
    (package / "sub/c.py").write_text("x = 3\n", encoding="utf-8")  # same size, other hash
    assert os.path.join("sub", "c.py") in bytecode_state(str(package))["stale"]


def test_the_report_warns_when_bytecode_is_stale_and_not_written() -> None:
    stale = {"modules": 9, "stale": ["a.py", "b.py"], "writes": False}
    results: dict[str, Any] = {"bytecode": stale}
    text = report.render_markdown(results)
    assert "2 of 9 pynumabind modules have no current bytecode (a.py, b.py)" in text
    assert "PYTHONDONTWRITEBYTECODE is set" in text
    results["bytecode"] = {"modules": 9, "stale": [], "writes": False}
    assert "bytecode" not in report.render_markdown(results)
