"""``pynumabind report``: on this machine for real, and on the recorded GPU machines.

This machine (one NUMA node, no GPU, no NVML, a CUDA runtime without a
driver) runs the whole command as a user would: the console script, a real
``check`` and ``advise --quick``, real cgroups.  The GPU machines are the
recorded ones (``tests/machines``): their sysfs trees, NVML faked at the
pynvml function boundary from the same descriptions, and real published
``nvidia-smi topo -m`` outputs printed by a stand-in ``nvidia-smi`` on a
``PATH`` of the test's own; there the report is built through
:func:`~pynumabind.cli._report._gather.build_report` (and once through the
command, with its sysfs root pointed at the tree), and ``check``, ``advise``
and the CUDA runtime are skipped: nothing can be bound or measured on a
machine that is not this one.  Planted disagreements (an NVML affinity that
contradicts sysfs, an nvidia-smi table that contradicts the plan) must make
the report exit 1 and name them.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from pynumabind._os import nvml as _nvml
from pynumabind.advisor._copies import CudaRuntime
from pynumabind.cli import main, report_layout
from pynumabind.cli._report import _gather
from pynumabind.cli._report._checks import Facts, cross_checks
from pynumabind.cli._report._document import SECTIONS, VERDICTS, Report
from pynumabind.cli._report._redact import HOST, Redactor
from pynumabind.cli._report._text import WIDTH, render, wrap
from pynumabind.cpulist import parse_cpulist
from pynumabind.model import SCHEMA_VERSION, Topology

from ..support import cgroups, fake_nvml, fake_tools
from ..support import sysfs_tree as st
from ..support.childproc import child_command
from ..support.cli_helpers import SCRIPT, assert_one_line_error, run
from . import child_cli

NVIDIA_MACHINES = [
    name
    for name in st.machine_names()
    if any(g["vendor"] == "0x10de" for g in st.load_machine(name)["gpus"])
]

#: How show, plan and check print: what the command hands the report.
LAYOUT = report_layout()

#: The recorded machines that also have a real nvidia-smi table.
WITH_TABLES = [n for n in NVIDIA_MACHINES if (fake_tools.OUTPUTS / f"{n}.txt").is_file()]


def verdicts(report: Report, name: str) -> List[str]:
    return [c.verdict for c in report.checks if c.name == name]


def by_name(document: Dict[str, Any], name: str) -> List[Dict[str, Any]]:
    return [c for c in document["cross_checks"] if c["name"] == name]


# ------------------------------------------------------------ this machine


@pytest.fixture(scope="module")
def this_machine_json() -> Dict[str, Any]:
    """``pynumabind report --json`` here, as a user runs it (check and advise included)."""
    result = run("report", "--json", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "Traceback" not in result.stderr
    document: Dict[str, Any] = json.loads(result.stdout)
    return document


def test_report_json_on_this_machine_holds_every_section(this_machine_json: Dict[str, Any]) -> None:
    document = this_machine_json
    assert document["schema"] == SCHEMA_VERSION and document["document"] == "report"
    assert document["exit_status"] == 0 and document["summary"]["disagree"] == 0
    assert list(document["sections"]) == [name for name, _ in SECTIONS]
    assert {s["status"] for s in document["sections"].values()} == {"ok"}
    sections = {name: s["data"] for name, s in document["sections"].items()}
    assert sections["versions"]["libnuma"]["file"] is not None
    assert sections["versions"]["nvml"]["reason"]  # no driver here: the reason is given
    assert "CUDA_VISIBLE_DEVICES" in sections["environment"]["visibility"]
    topology = Topology.from_dict(sections["machine"]["topology"])
    assert topology.allowed_cpus == frozenset(os.sched_getaffinity(0))
    assert sections["machine"]["nvml"]["asked"] is False and sections["machine"]["nvml"]["why"]
    assert parse_cpulist(sections["limits"]["affinity"]) == topology.allowed_cpus
    assert sections["plans"]["default"][0]["cpus"] is not None
    assert sections["check"]["ok"] is True and sections["check"]["workers"]
    assert sections["advise"]["recommendation"]
    assert sections["nvidia_smi"]["tool"] is None
    assert {c["verdict"] for c in document["cross_checks"]} <= set(VERDICTS)
    named = {c["name"] for c in document["cross_checks"]}
    assert {"check-run", "plan-within-limits", "cpuset", "cuda-order", "gpu-count"} <= named
    assert [c["verdict"] for c in by_name(document, "check-run")] == ["agree"]
    # A CUDA runtime that loads without a driver is a reason, not a crash.
    cuda = sections["versions"]["cuda_runtime"]
    assert cuda["reason"] is not None or cuda["devices"]


def test_text_report_fits_the_width_and_starts_with_the_result() -> None:
    result = run("report", "--no-advise")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("pynumabind report -- pynumabind ")
    assert lines[1].startswith("Result: no cross-check disagrees") and "exit status 0" in lines[1]
    assert [line for line in lines if len(line) > WIDTH] == []
    titles = [line for line in lines if line.startswith("== ")]
    assert titles == [f"== {title} ==" for _, title in SECTIONS]
    assert "skipped: --no-advise" in result.stdout
    assert re.search(r"^(\d+) of \1 workers bound as planned$", result.stdout, re.M)


def test_output_file(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    result = run("report", "--json", "--no-advise", "--no-check", "-o", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"wrote the report to {target}"
    assert json.loads(target.read_text())["sections"]["check"]["status"] == "skipped"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-o", "{tmp}"], ["is a directory"]),
        (["-o", ""], ["file name is empty"]),
        (["-o", "{tmp}/missing/report.txt"], ["cannot write", "No such file or directory"]),
        (["--bogus"], ["--bogus"]),
    ],
)
def test_usage_errors_exit_2_before_anything_runs(
    tmp_path: Path, args: List[str], words: List[str]
) -> None:
    result = run("report", *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert_one_line_error(result, 2, *words)
    assert result.stdout == ""


def test_redact_on_this_machine() -> None:
    uuid = "GPU-2d564ddf-3170-55f2-bb92-172fa0e3cf31"
    env = {"NVIDIA_VISIBLE_DEVICES": uuid, "PYNUMABIND_EXTRA_NOTE": uuid[:12]}
    for form in (["--json"], []):
        result = run("report", "--redact", "--no-advise", "--no-check", *form, env=env)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "2d564ddf" not in out and "GPU-<uuid-1>" in out
        host = socket.gethostname()
        assert not re.search(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", out), host
        home = os.path.expanduser("~")
        if home not in ("/", ""):
            assert f"{home}/" not in out
    assert (
        json.loads(run("report", "--json", "--redact", "--no-advise", "--no-check").stdout)["host"]
        == HOST
    )


def test_a_section_that_fails_is_kept_and_the_report_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(self: Any) -> None:
        raise RuntimeError("planted failure")

    monkeypatch.setattr(_gather._Gatherer, "kernel", broken)
    assert main(["report", "--no-advise", "--no-check"]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert "section(s) failed: kernel; exit status 1" in out
    assert "FAILED: RuntimeError: planted failure" in out
    assert "in broken" in out  # where it failed, from the traceback kept in the report
    assert "== Plans, one per local rank ==" in out  # the sections after it are there


def test_a_cross_check_that_raises_is_kept_and_the_others_are_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pynumabind.cli._report import _checks

    def broken(facts: Any) -> List[Any]:
        raise KeyError("planted")

    planted = tuple(
        (name, broken if name == "cpuset" else verdicts) for name, verdicts in _checks.CROSS_CHECKS
    )
    monkeypatch.setattr(_gather, "CROSS_CHECKS", planted)
    assert main(["report", "--json", "--no-advise", "--no-check"]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    document = json.loads(out)
    assert document["exit_status"] == 1
    assert document["summary"]["failed_checks"] == ["cpuset: KeyError: 'planted'"]
    assert by_name(document, "cpuset") == [] and by_name(document, "plan-within-limits")
    logged = "\n".join(document["sections"]["log"]["data"]["records"])
    assert "ERROR: cross-check cpuset failed" in logged and "in broken" in logged
    assert main(["report", "--no-advise", "--no-check"]) == 1
    text = capsys.readouterr().out
    assert "cross-check(s) failed to run: cpuset; exit status 1" in text
    assert "  FAILED    cpuset: KeyError: 'planted'" in text


def test_inside_a_real_cpuset(cpuset0: str) -> None:
    """Run in a cgroup v1 cpuset of CPU 0 and node 0: the report sees it, and check binds in it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    command = child_command(
        child_cli.exec_when_told, SCRIPT, "report", "--json", "--no-advise", alarm=0
    )
    done = cgroups.run_moved(cpuset0, command, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    document = json.loads(done.stdout)
    limits = document["sections"]["limits"]["data"]
    assert (limits["cgroup"]["cpuset_cpus"], limits["cgroup"]["cpuset_mems"]) == ("0", "0")
    assert limits["cgroup"]["paths"]["cpuset"] == cpuset0[len(f"{cgroups.CGROUP_V1}/cpuset") :]
    assert [c["verdict"] for c in by_name(document, "cpuset")] == ["agree", "agree"]
    assert [c["verdict"] for c in by_name(document, "check-run")] == ["agree"]
    workers = document["sections"]["check"]["data"]["workers"]
    assert [w["bound_cpus"] for w in workers] == ["0"]


@pytest.fixture
def cpuset0() -> Iterator[str]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs CPUs 0 and 1 to confine a child to CPU 0")
    yield from cgroups.group("cpuset", {"cpuset.cpus": "0", "cpuset.mems": "0"})


def test_an_advice_record_is_followed_and_a_stale_one_disagrees(tmp_path: Path) -> None:
    record = tmp_path / "advice.json"
    saved = run("advise", "--quick", "--no-copies", "--no-latency", "--save", str(record))
    assert saved.returncode == 0, saved.stderr
    env = {"PYNUMABIND_ADVICE": str(record)}
    fresh = json.loads(run("report", "--json", "--no-advise", "--no-check", env=env).stdout)
    assert [c["verdict"] for c in by_name(fresh, "advice-record")] == ["agree"]
    advised = fresh["sections"]["plans"]["data"]["advised"]
    assert advised["record"] == str(record) and advised["ranks"]
    data = json.loads(record.read_text())
    data["machine"]["kernel"] = "0.0.0-another-kernel"
    record.write_text(json.dumps(data))
    result = run("report", "--json", "--no-advise", "--no-check", env=env)
    assert result.returncode == 1
    stale = by_name(json.loads(result.stdout), "advice-record")
    assert [c["verdict"] for c in stale] == ["disagree"] and "stale" in stale[0]["detail"]


# ------------------------------------------------------- recorded machines


@pytest.fixture
def nvml_state() -> Iterator[None]:
    _nvml.forget()
    yield
    _nvml.forget()


def recorded(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    desc: Optional[Dict[str, Any]] = None,
    table: Optional[str] = None,
    environ: Optional[Dict[str, str]] = None,
    **fake: Any,
) -> _gather.Settings:
    """Settings for the report of recorded machine ``name`` (or ``desc``), with its NVML faked.

    ``table``: what the stand-in nvidia-smi prints (default: the recorded
    table of that machine, when there is one; none: not on PATH).
    """
    desc = st.load_machine(name) if desc is None else desc
    root = st.build_sysfs(desc, tmp_path / name)
    fake_nvml.install_fake_nvml(monkeypatch, desc, **fake)
    _nvml.forget()
    if table is None and (fake_tools.OUTPUTS / f"{name}.txt").is_file():
        table = fake_tools.recorded(name)
    smi_path = str(tmp_path / "empty")
    if table is not None:
        smi_path = fake_tools.printing(tmp_path / "bin", table)
    allowed = {k: parse_cpulist(desc[k]) for k in ("allowed_cpus", "allowed_mems") if k in desc}
    return _gather.Settings(
        sysfs_root=str(root), environ=environ or {}, smi_path=smi_path, **allowed
    )


@pytest.mark.parametrize("name", NVIDIA_MACHINES)
def test_every_recorded_nvidia_machine_agrees_with_itself(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_state: None
) -> None:
    report = _gather.build_report(recorded(name, tmp_path, monkeypatch), LAYOUT)
    desc = st.load_machine(name)
    opened = [g for g in desc["gpus"] if not g.get("nvml", {}).get("no_permission")]
    assert verdicts(report, "nvml-cpu-affinity") == ["agree"] * len(opened)
    numa = verdicts(report, "nvml-numa-node")
    assert set(numa) <= {"agree", "not applicable"} and len(numa) == len(opened)
    assert verdicts(report, "gpu-count") == ["agree"]
    assert {s.name: s.status for s in report.sections}["check"] == "skipped"
    assert report.failed_sections == []
    # Every rank that can be planned is within the limits; only a cpuset that hides a
    # GPU's node (the Slurm job of a100_pcie_slurm_cgroup, fallback "error") is not.
    plans = verdicts(report, "plan-within-limits")
    if name == "a100_pcie_slurm_cgroup":
        assert plans == ["agree"] * 4 + ["disagree"] * 4 and report.exit_status == 1
    else:
        assert "disagree" not in plans and report.exit_status == 0, render(report)
    assert [line for line in render(report).splitlines() if len(line) > WIDTH] == []


@pytest.mark.parametrize("name", WITH_TABLES)
def test_the_plan_agrees_with_the_recorded_nvidia_smi_table(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_state: None
) -> None:
    report = _gather.build_report(recorded(name, tmp_path, monkeypatch), LAYOUT)
    rows = len(_smi_rows(name))
    smi = [c for c in report.checks if c.name == "nvidia-smi-numa"]
    agreeing = [c for c in smi if c.verdict == "agree"]
    if name == "a100_pcie_slurm_cgroup":  # ranks 4-7 cannot be planned: no node to compare
        assert len(agreeing) == 4
    else:
        assert len(agreeing) == rows, [c.detail for c in smi]
    assert all(c.verdict == "not applicable" for c in smi if c not in agreeing)
    assert "disagree" not in verdicts(report, "nvidia-smi-gpu-numa-id")


def _smi_rows(name: str) -> List[str]:
    return [
        line
        for line in fake_tools.recorded(name).splitlines()
        if "Affinity" not in line and line.split() and re.match(r"GPU\d+$", line.split()[0])
    ]


def test_gb200_gpu_numa_id_is_the_memory_node_and_a_missing_row_is_not_applicable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_state: None
) -> None:
    report = _gather.build_report(recorded("gb200_nvl_tray", tmp_path, monkeypatch), LAYOUT)
    ids = [c for c in report.checks if c.name == "nvidia-smi-gpu-numa-id"]
    assert [c.verdict for c in ids] == ["agree"] * 3
    assert "GPU NUMA ID 2, pynumabind's memory node 2" in ids[0].detail
    missing = [c for c in report.checks if c.subject.startswith("rank 3")]
    assert [(c.verdict, c.detail) for c in missing if c.name == "nvidia-smi-numa"] == [
        ("not applicable", "nvidia-smi printed no row for GPU3")
    ]


def test_planted_nvml_affinity_that_contradicts_sysfs_disagrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_state: None
) -> None:
    desc = st.load_machine("dgx_h100")
    desc["gpus"][0]["nvml"]["cpu_affinity"] = "56-111,168-223"  # node 1's CPUs for a node-0 GPU
    report = _gather.build_report(recorded("dgx_h100", tmp_path, monkeypatch, desc=desc), LAYOUT)
    wrong = [c for c in report.checks if c.verdict == "disagree"]
    assert [(c.name, c.subject) for c in wrong] == [("nvml-cpu-affinity", "GPU 0 (0000:18:00.0)")]
    assert "NVML gives CPUs 56-111,168-223, sysfs local_cpulist 0-55,112-167" in wrong[0].detail
    assert report.exit_status == 1
    text = render(report)
    assert "1 cross-check disagree (nvml-cpu-affinity); exit status 1" in text
    assert "  DISAGREE  nvml-cpu-affinity (GPU 0 (0000:18:00.0))" in text


def test_planted_disagreement_through_the_command(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    nvml_state: None,
) -> None:
    """The command itself, its sysfs root pointed at the recorded tree: exit status 1."""
    desc = st.load_machine("dgx_h100")
    desc["gpus"][5]["nvml"]["cpu_affinity"] = "0-55,112-167"
    settings = recorded("dgx_h100", tmp_path, monkeypatch, desc=desc)
    from pynumabind.cli import _report

    monkeypatch.setattr(_report, "SYSFS_ROOT", settings.sysfs_root)
    monkeypatch.setenv("PATH", f"{settings.smi_path}{os.pathsep}{os.environ['PATH']}")
    for name in [k for k in os.environ if k.startswith("PYNUMABIND_")]:
        monkeypatch.delenv(name)
    assert main(["report", "--json", "--no-advise", "--no-check"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["exit_status"] == 1
    wrong = [c for c in document["cross_checks"] if c["verdict"] == "disagree"]
    assert [(c["name"], c["subject"]) for c in wrong] == [
        ("nvml-cpu-affinity", "GPU 5 (0000:ab:00.0)")
    ]
    # nvidia-smi's table agrees with the plan (NVML's CPUs do not move GPU 5: its node does).
    smi = by_name(document, "nvidia-smi-numa")
    assert len(smi) == 8 and {c["verdict"] for c in smi} == {"agree"}


def test_planted_nvidia_smi_table_that_contradicts_the_plan_disagrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_state: None
) -> None:
    lines = fake_tools.recorded("dgx_h100").splitlines(keepends=True)
    gpu0 = next(i for i, line in enumerate(lines) if line.startswith("GPU0\t"))
    lines[gpu0] = lines[gpu0].replace("0-55,112-167\t0\t", "56-111,168-223\t1\t")
    settings = recorded("dgx_h100", tmp_path, monkeypatch, table="".join(lines))
    report = _gather.build_report(settings, LAYOUT)
    wrong = [c for c in report.checks if c.verdict == "disagree"]
    assert [(c.name, c.subject) for c in wrong] == [
        ("nvidia-smi-numa", "rank 0, GPU 0 (0000:18:00.0)")
    ]
    assert wrong[0].detail == "plan's node 0, nvidia-smi GPU0's NUMA Affinity 1"


def test_nvidia_smi_is_not_compared_when_a_device_cgroup_renumbers_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_state: None
) -> None:
    settings = recorded(
        "dgx_h100_constrain_devices", tmp_path, monkeypatch, table=fake_tools.recorded("dgx_h100")
    )
    report = _gather.build_report(settings, LAYOUT)
    smi = [c for c in report.checks if c.name == "nvidia-smi-numa"]
    assert [c.verdict for c in smi] == ["not applicable"]
    assert "denies GPU(s) 0-3" in smi[0].detail
    count = [c for c in report.checks if c.name == "gpu-count"]
    assert [(c.verdict, c.detail) for c in count] == [
        ("agree", "NVML counts 8 GPU(s) (4 denied), sysfs lists 8")
    ]


def test_legacy_socket_wide_affinity_holds_sysfs_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_state: None
) -> None:
    desc = st.load_machine("dgx_a100_nps4")
    socket0 = "0-63,128-191"  # nodes 0-3: what the legacy call answers under NPS4
    desc["gpus"][0]["nvml"]["cpu_affinity"] = socket0
    old = _gather.build_report(
        recorded("dgx_a100_nps4", tmp_path / "old", monkeypatch, desc=desc, no_scope_api=True),
        LAYOUT,
    )
    first = next(c for c in old.checks if c.name == "nvml-cpu-affinity")
    assert first.verdict == "agree" and "legacy socket-wide mask" in first.detail
    new = _gather.build_report(
        recorded("dgx_a100_nps4", tmp_path / "new", monkeypatch, desc=desc), LAYOUT
    )
    first = next(c for c in new.checks if c.name == "nvml-cpu-affinity")
    assert first.verdict == "disagree"  # the node-scope call must not answer a socket


def test_gpu_count_in_a_container_and_a_gpu_sysfs_does_not_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_state: None
) -> None:
    # A container given GPUs 2 and 5: NVML enumerates those, sysfs shows all eight.
    given = _gather.build_report(
        recorded("dgx_h100", tmp_path / "a", monkeypatch, order=[2, 5]), LAYOUT
    )
    count = next(c for c in given.checks if c.name == "gpu-count")
    assert count.verdict == "agree" and "given some of the machine's GPUs" in count.detail
    # NVML lists a GPU whose PCI function sysfs does not show.
    desc = st.load_machine("dgx_h100")
    sysfs_desc = {**desc, "gpus": desc["gpus"][:7]}
    root = st.build_sysfs(sysfs_desc, tmp_path / "b" / "tree")
    fake_nvml.install_fake_nvml(monkeypatch, desc)
    _nvml.forget()
    report = _gather.build_report(
        _gather.Settings(sysfs_root=str(root), environ={}, smi_path=str(tmp_path)), LAYOUT
    )
    count = next(c for c in report.checks if c.name == "gpu-count")
    assert count.verdict == "disagree" and "0000:db:00.0" in count.detail
    unmatched = [c for c in report.checks if c.subject == "GPU 7 (0000:db:00.0)"]
    assert [c.verdict for c in unmatched] == ["not applicable"]


def test_redacted_recorded_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_state: None
) -> None:
    desc = st.load_machine("dgx_h100")
    uuids = [g["uuid"] for g in desc["gpus"]]
    prefix = uuids[2][:12]  # CUDA_VISIBLE_DEVICES may name a GPU by a UUID prefix
    settings = recorded("dgx_h100", tmp_path, monkeypatch, environ={"CUDA_VISIBLE_DEVICES": prefix})
    report = _gather.redact(_gather.build_report(settings, LAYOUT), home="/nonexistent-home")
    document = json.dumps(report.to_dict(SCHEMA_VERSION))
    text = render(report)
    for uuid in uuids:
        bare = uuid[4:]
        assert bare not in document and bare not in text
    for gpu in desc["gpus"]:
        assert gpu["bus_id"] in document  # PCI bus ids are topology: they stay
    token = report.section("machine").data["topology"]["gpus"][0]["uuid"]
    visible = report.section("environment").data["visibility"]["CUDA_VISIBLE_DEVICES"]
    assert visible == token and token.startswith("GPU-<uuid-")  # one token, both places
    assert report.section("machine").data["topology"]["gpus"][0]["pci_bus_id"] == "0000:3a:00.0"
    assert report.host == HOST and report.redacted


# ---------------------------------------------------------------- pure parts


def test_cuda_order_compares_each_ordinal_with_the_visible_gpu() -> None:
    from ..support.topology_builders import dgx_h100

    topology = dgx_h100()
    buses = [g.pci_bus_id.upper() for g in topology.gpus]
    same = CudaRuntime("libcudart.so.12", "12.4", "12.4", tuple(enumerate(buses)))
    assert {c.verdict for c in _cuda(same, topology)} == {"agree"}
    swapped = CudaRuntime(
        "libcudart.so.12", "12.4", "12.4", tuple(enumerate([buses[1], buses[0], *buses[2:]]))
    )
    assert [c.verdict for c in _cuda(swapped, topology)][:3] == ["disagree", "disagree", "agree"]
    fewer = CudaRuntime("libcudart.so.12", "12.4", "12.4", tuple(enumerate(buses[:2])))
    checks = _cuda(fewer, topology)
    assert checks[0].verdict == "disagree" and "CUDA sees 2 device(s), pynumabind 8" in (
        checks[0].detail
    )
    none = CudaRuntime(reason="the CUDA runtime library is not loadable (...)")
    assert [c.verdict for c in _cuda(none, topology)] == ["not applicable"]


def _cuda(cuda: CudaRuntime, topology: Topology) -> List[Any]:
    return [c for c in cross_checks(Facts(topology=topology, cuda=cuda)) if c.name == "cuda-order"]


def test_every_check_is_not_applicable_without_facts_and_says_why() -> None:
    facts = Facts(missing={"topology": "the machine section failed: OSError: planted"})
    checks = cross_checks(facts)
    assert {c.verdict for c in checks} == {"not applicable"}
    assert all(c.detail for c in checks)
    assert any("OSError: planted" in c.detail for c in checks)


def test_redactor_rules() -> None:
    redactor = Redactor(hosts=["gpu-node-17"], home="/home/alice")
    uuid = "GPU-8d1c1f4e-6b2a-4d55-9f0e-123456789abc"
    redactor.learn({"gpus": [{"uuid": uuid}, {"uuid": "GPU-0123456789abcdef"}], "host": "h1"})
    assert redactor.text(f"{uuid} and GPU-8d1c and MIG-{uuid}/1/0") == (
        "GPU-<uuid-1> and GPU-<uuid-1> and MIG-GPU-<uuid-1>/1/0"
    )
    assert redactor.text("on gpu-node-17.example: /home/alice/.cache x") == (
        "on <host>.example: ~/.cache x"
    )
    assert redactor.text("0000:18:00.0 node 1 GPU-bound GPU-less h1") == (
        "0000:18:00.0 node 1 GPU-bound GPU-less <host>"
    )
    assert redactor.document({"uuid": "GPU-0123456789abcdef", "serial": "1654922004561"}) == {
        "uuid": "GPU-<uuid-2>",
        "serial": "<serial-1>",
    }
    assert redactor.document({f"MIG-{uuid}": "x"}) == {"MIG-GPU-<uuid-1>": "x"}


def test_wrap_keeps_each_line_within_the_width() -> None:
    line = "  - " + " ".join(["word"] * 60)
    wrapped = wrap(line, 40)
    assert all(len(part) <= 40 for part in wrapped)
    assert all(part.startswith("    ") for part in wrapped[1:])
    assert " ".join(p.strip() for p in wrapped).replace("- ", "", 1) == " ".join(["word"] * 60)
    assert wrap("  - " + "x" * 120, 100) == ["  - " + "x" * 96, "    " + "x" * 24]  # cut


def test_the_report_and_its_page_send_users_to_the_project_issue_tracker() -> None:
    from pynumabind.cli._report._text import ISSUES

    root = Path(__file__).resolve().parents[2]
    urls = re.search(
        r"^\[project\.urls\]\n(.*?)(?:^\[|\Z)", (root / "pyproject.toml").read_text(), re.M | re.S
    )
    assert urls is not None
    tracker = re.search(r'^Issues = "([^"]+)"', urls.group(1), re.M)
    assert tracker is not None and tracker.group(1) == ISSUES
    page = (root / "docs" / "site" / "report.md").read_text()
    assert f"<{ISSUES}>" in page
    # Every cross-check the report can give is explained on the page, and every section named.
    from pynumabind.cli._report import _checks

    names = set(re.findall(r"^``([a-z-]+)``", _checks.__doc__ or "", re.M))
    assert names and all(f"`{name}`" in page for name in names)
    assert all(f"`{name}`" in page for name, _ in SECTIONS)
