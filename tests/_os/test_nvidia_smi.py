"""``nvidia-smi topo -m``: its table read from real published outputs, and the tool run for real.

The outputs under ``tests/machines/nvidia_smi/`` are real ones (their sources
are in that folder's README).  Where a recorded machine of ``tests/machines/``
is the same machine, the table must name the nodes its description gives,
GPU by GPU: two records of one machine, checked against each other.

No nvidia-smi runs here, so :func:`run_topology` runs small executables
written for each test on a ``PATH`` of their own -- the real subprocess
path: the lookup, the fixed argv (each script checks it), the time and
output limits, exit statuses and signals.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pynumabind._os import nvidia_smi as smi
from pynumabind.cpulist import parse_cpulist

from ..support import fake_tools
from ..support import sysfs_tree as st
from ..support.import_scan import all_modules, package_imports

OUTPUTS = fake_tools.OUTPUTS

#: The recorded tables that are machines of tests/machines (same name).
MACHINES = sorted(p.stem for p in OUTPUTS.glob("*.txt") if p.stem in st.machine_names())


#: What starting a program takes in Python: none of it may appear outside nvidia_smi.
STARTERS = ("import subprocess", "os.system(", "os.popen(", "os.spawn", "os.posix_spawn")


def read(name: str) -> str:
    return fake_tools.recorded(name)


def ids(text: str) -> frozenset[int]:
    return parse_cpulist(text)


# ------------------------------------------------------------------ reading


def test_every_recorded_output_is_read() -> None:
    for path in sorted(OUTPUTS.glob("*.txt")):
        if path.stem == "glued_columns":  # rows only: see test_glued_columns
            continue
        table = smi.parse_topology(path.read_text(encoding="utf-8"))
        assert table.gpus, path.name
        assert [g.index for g in table.gpus] == list(range(len(table.gpus))), path.name


@pytest.mark.parametrize("name", MACHINES)
def test_the_table_names_the_nodes_the_recorded_machine_gives(name: str) -> None:
    desc = st.load_machine(name)
    table = smi.parse_topology(read(name))
    assert table.columns == ("cpu", "numa", "gpu_numa")
    expected = desc["expect"]["gpu_numa_nodes"]
    memory = desc["expect"].get("gpu_memory_nodes") or [None] * len(expected)
    for row in table.gpus:
        assert row.problem is None, row
        assert row.numa_affinity is not None and expected[row.index] in row.numa_affinity
        assert row.gpu_numa_id == memory[row.index]
        gpu = desc["gpus"][row.index]
        if row.cpu_affinity is not None:  # nvidia-smi prints NVML's CPU affinity
            assert row.cpu_affinity == ids(gpu["nvml"]["cpu_affinity"]), row.index
    assert MACHINES, "no recorded table matches a recorded machine"


def test_tabs_glued_headers_and_glued_link_cells() -> None:
    # DGX H100 as pasted: "NIC8NIC9" in the header, "NODENODE" in rows, tabs.
    table = smi.parse_topology(read("dgx_h100"))
    assert len(table.gpus) == 8
    assert table.gpu(4) == smi.SmiGpu(4, ids("56-111,168-223"), frozenset({1}), None)
    assert table.gpu(8) is None


def test_gb200_numa_affinity_is_a_list_and_gpu_numa_id_a_memory_node() -> None:
    table = smi.parse_topology(read("gb200_nvl_tray"))
    assert table.gpu(0) == smi.SmiGpu(0, ids("0-71"), ids("0,3-9,11-17"), 2)
    assert table.gpu(2) == smi.SmiGpu(2, ids("72-143"), ids("1,19-25,27-33"), 18)


def test_an_empty_cpu_affinity_under_a_cpuset_leaves_the_other_columns() -> None:
    # Slurm -c32 on an 8x A100: GPUs 4-7's CPUs are all outside the job's cpuset.
    table = smi.parse_topology(read("a100_pcie_slurm_cgroup"))
    assert table.gpu(0) == smi.SmiGpu(0, ids("0-15,56-71"), frozenset({0}), None)
    assert table.gpu(5) == smi.SmiGpu(5, None, frozenset({1}), None)


def test_not_available_is_unknown() -> None:
    table = smi.parse_topology(read("not_available"))
    assert table.gpus == (smi.SmiGpu(0, ids("0-7"), None, None),)


def test_stride_lists_and_indented_rows() -> None:
    assert smi.parse_topology(read("stride_lists")).gpu(1) == smi.SmiGpu(
        1, ids("4,12,20,28"), frozenset({1}), None
    )
    indented = smi.parse_topology(read("indented_rows"))
    assert [g.cpu_affinity for g in indented.gpus] == [ids("0-15")] * 2


def test_glued_columns() -> None:
    """The rows as pasted into a vLLM bug report, behind a header of the same nvidia-smi format.

    ``0N/A`` splits at the N/A; a CPU list run into the NUMA column cannot be
    split without guessing, so that row says so and carries no affinity.
    """
    header = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    table = smi.parse_topology(header + read("glued_columns"))
    assert table.gpu(0) == smi.SmiGpu(0, ids("0-55,112-167"), frozenset({0}), None)
    assert table.gpu(3) == smi.SmiGpu(3, ids("0-55,112-167"), frozenset({0}), None)
    glued = table.gpu(4)
    assert glued is not None and glued.problem is not None
    assert "run together" in glued.problem and "56-111,168-2231" in glued.problem
    assert (glued.cpu_affinity, glued.numa_affinity) == (None, None)


def test_the_old_format_without_numa_columns() -> None:
    # Drivers before ~470 (DGX-1 era): "CPU Affinity" only, and "SOC" links.
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-19,40-59\nGPU1\tSOC\t X \t20-39,60-79\n"
    table = smi.parse_topology(text)
    assert table.columns == ("cpu",)
    assert table.gpu(1) == smi.SmiGpu(1, ids("20-39,60-79"), None, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-7\tzero\tN/A\n",
         "not a list or N/A"),
        ("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-7\t0\tN/A\textra\n",
         "4 affinity cell(s)"),
    ],
)  # fmt: skip
def test_a_row_that_cannot_be_read_says_why(text: str, problem: str) -> None:
    row = smi.parse_topology(text).gpu(0)
    assert row is not None and row.problem is not None and problem in row.problem


@pytest.mark.parametrize(
    "text",
    ["", "No devices were found\n", "\tGPU0\tCPU Affinity\tNUMA Affinity\n\nLegend:\n"],
)
def test_text_that_is_no_table_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="not nvidia-smi topo -m output"):
        smi.parse_topology(text)


# ------------------------------------------------------------------ running


def tool(folder: Path, body: str) -> str:
    return fake_tools.nvidia_smi(folder, body)


def test_runs_the_tool_on_path_and_reads_its_table(tmp_path: Path) -> None:
    where = tool(tmp_path / "bin", f"cat '{OUTPUTS / 'dgx_h100.txt'}'\n")
    run = smi.run_topology(search_path=where)
    assert run.reason is None and run.tool == str(tmp_path / "bin" / "nvidia-smi")
    assert run.text == read("dgx_h100")
    assert len(smi.parse_topology(run.text).gpus) == 8


def test_not_on_path(tmp_path: Path) -> None:
    run = smi.run_topology(search_path=str(tmp_path))
    assert run == smi.SmiRun(None, None, "nvidia-smi is not on PATH")


def test_a_failing_tool_says_its_status_and_first_error_line(tmp_path: Path) -> None:
    said = "NVIDIA-SMI has failed because it could not communicate with the driver"
    body = f"echo '{said}' >&2\nexit 9\n"
    run = smi.run_topology(search_path=tool(tmp_path / "bin", body))
    assert run.text is None and run.reason is not None
    assert "exit status 9: NVIDIA-SMI has failed" in run.reason


def test_a_tool_killed_by_a_signal(tmp_path: Path) -> None:
    run = smi.run_topology(search_path=tool(tmp_path / "bin", "kill -KILL $$\n"))
    assert run.reason is not None and "ended by SIGKILL" in run.reason


def test_a_hanging_tool_is_killed_at_the_time_limit(tmp_path: Path) -> None:
    began = time.monotonic()
    run = smi.run_topology(search_path=tool(tmp_path / "bin", "exec sleep 30\n"), timeout=0.5)
    assert time.monotonic() - began < 5
    assert run.text is None and run.reason is not None and "time limit" in run.reason


def test_a_tool_that_closes_its_output_but_does_not_exit_is_killed(tmp_path: Path) -> None:
    body = "echo GPU0\nexec >&- 2>&-\nexec sleep 30\n"
    began = time.monotonic()
    run = smi.run_topology(search_path=tool(tmp_path / "bin", body), timeout=0.5)
    assert time.monotonic() - began < 5
    assert run.reason is not None and "did not exit within the time limit" in run.reason


def test_output_beyond_the_limit_stops_the_tool(tmp_path: Path) -> None:
    run = smi.run_topology(search_path=tool(tmp_path / "bin", "exec yes GPU0\n"), limit=100_000)
    assert run.text is None and run.reason is not None
    assert "printed more than 100000 bytes" in run.reason


def test_output_that_is_not_utf8(tmp_path: Path) -> None:
    run = smi.run_topology(search_path=tool(tmp_path / "bin", "printf 'GPU0 \\377\\n'\n"))
    assert run.reason is not None and "not UTF-8" in run.reason


def test_a_file_that_cannot_be_run(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    tool(folder, "true\n")
    (folder / "nvidia-smi").write_bytes(b"\x7fELF not really")  # executable, not a program
    run = smi.run_topology(search_path=str(folder))
    assert run.text is None and run.reason is not None and "cannot run" in run.reason


def test_no_value_from_the_environment_reaches_the_argv(tmp_path: Path) -> None:
    # The script exits 99 unless its argv is exactly "topo -m"; print the environment's
    # hostile value back to show it was only in the environment.
    body = 'printf "%s\\n" "$HOSTILE"\n'
    os.environ["HOSTILE"] = "; rm -rf / $(id)"
    try:
        run = smi.run_topology(search_path=tool(tmp_path / "bin", body))
    finally:
        del os.environ["HOSTILE"]
    assert run.text == "; rm -rf / $(id)\n"


def test_only_the_report_runs_the_tool_and_nothing_else_starts_a_program() -> None:
    modules = all_modules()
    importers = {m for m in modules if "_os.nvidia_smi" in package_imports(m, modules)}
    assert importers == {"cli._report._gather"}
    starting = sorted(
        m
        for m, path in modules.items()
        if any(word in path.read_text(encoding="utf-8") for word in STARTERS)
    )
    assert starting == ["_os.nvidia_smi"]
