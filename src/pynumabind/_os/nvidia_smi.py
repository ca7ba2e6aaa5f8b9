"""``nvidia-smi topo -m``: run it (bounded), and read its table (pure).

The one module of the package that starts a program.  Only ``pynumabind
report`` asks it (a cross-check of the plan against what NVIDIA's own tool
prints); nothing on the bind path imports it, so a bind never runs a
subprocess.  How it runs:

* the tool is looked up on ``PATH`` (``shutil.which``); not found is an
  answer ("not on PATH"), not an error;
* a fixed argv, ``[tool, "topo", "-m"]``, never a shell: no value from the
  environment or the user reaches a command line;
* at most :data:`MAX_OUTPUT` bytes are read and at most :data:`TIMEOUT`
  seconds waited; a tool that prints more or answers later is killed and
  reaped, and the answer says which limit it hit;
* every failure (cannot start it, a signal, a non-zero exit status, output
  that is not UTF-8) is an answer with the reason: :func:`run_topology`
  never raises for the tool's sake.

Reading the table (:func:`parse_topology`) takes the text as printed and
is pure.  It reads the header line that names ``CPU Affinity``, then each
``GPU<n>`` row: the link cells (``X``, ``NV#``, ``SYS``, ``NODE``, ``PHB``,
``PXB``, ``PIX``, the old ``SOC``) first, then the affinity columns the
header names, in its order (``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA
ID``; drivers before about 470 print the first alone).  Rules, each from a
real output (``tests/machines/nvidia_smi/``):

* cells are split on any run of blanks, not on tabs or fixed columns
  (pasted copies lose tabs; widths vary);
* two link cells printed without a blank between them (``NODENODE``)
  are still link cells;
* ``N/A`` (no NUMA information) is "unknown", not an error;
* an empty ``CPU Affinity`` (the GPU's CPUs are all outside this job's
  cpuset: nvidia-smi prints only the CPUs the process may use) leaves one
  column fewer; the row is read with that column empty;
* a ``NUMA Affinity`` run into ``GPU NUMA ID`` (``0N/A``) is split at the
  ``N/A``;
* ``NUMA Affinity`` may be a list (``0,3-9,11-17`` on GB200: the CPU node
  and the GPUs' empty placeholder nodes);
* a CPU list run into the NUMA column (``56-111,168-2231``) cannot be split
  without guessing: that row carries a ``problem`` and no affinity.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..cpulist import parse_cpulist
from ..errors import ListParseError

__all__ = [
    "COLUMNS",
    "MAX_OUTPUT",
    "TIMEOUT",
    "TOOL",
    "SmiGpu",
    "SmiRun",
    "SmiTopology",
    "parse_topology",
    "run_topology",
]

#: The program, looked up on ``PATH``.
TOOL = "nvidia-smi"

#: Its arguments: always these.
ARGUMENTS = ("topo", "-m")

#: Seconds to wait for it (a driver that hangs must not hang the report).
TIMEOUT = 30.0

#: Bytes of its standard output read at most (a 72-GPU table is ~40 KiB).
MAX_OUTPUT = 1 << 20

#: Bytes of its standard error kept for the reason of a failure.
_MAX_ERROR = 4096

#: The affinity columns, as the header names them, and the keys they become.
COLUMNS = (("CPU Affinity", "cpu"), ("NUMA Affinity", "numa"), ("GPU NUMA ID", "gpu_numa"))

_GPU_ROW = re.compile(r"GPU(\d+)\Z")
_LINK_CELLS = re.compile(r"(?:X|NV\d+|SYS|NODE|PHB|PXB|PIX|SOC)+\Z")
_NOT_AVAILABLE = "N/A"


@dataclass(frozen=True)
class SmiRun:
    """One run of ``nvidia-smi topo -m``: its output, or why there is none.

    ``tool`` is the program found (``None``: not on ``PATH``); ``text`` its
    standard output when it exited 0 within the limits; ``reason`` otherwise.
    """

    tool: Optional[str]
    text: Optional[str]
    reason: Optional[str] = None
    seconds: float = 0.0


@dataclass(frozen=True)
class SmiGpu:
    """One ``GPU<n>`` row: ``index`` is nvidia-smi's (NVML's) number.

    ``None`` is a column printed as ``N/A``, left empty, or not printed by
    this driver; ``problem`` says why a row could not be read (its affinity
    fields are then all ``None``).
    """

    index: int
    cpu_affinity: Optional[frozenset[int]] = None
    numa_affinity: Optional[frozenset[int]] = None
    gpu_numa_id: Optional[int] = None
    problem: Optional[str] = None


@dataclass(frozen=True)
class SmiTopology:
    """The table: the affinity columns its header names (keys of :data:`COLUMNS`), its rows."""

    columns: Tuple[str, ...]
    gpus: Tuple[SmiGpu, ...]

    def gpu(self, index: int) -> Optional[SmiGpu]:
        """The row of nvidia-smi's GPU ``index``; ``None`` when it printed none."""
        return next((g for g in self.gpus if g.index == index), None)


# ------------------------------------------------------------------ reading


def _header_columns(line: str) -> Tuple[str, ...]:
    found = [(line.find(title), key) for title, key in COLUMNS if title in line]
    return tuple(key for _, key in sorted(found))


def _split_glued_id(cells: List[str], columns: Sequence[str]) -> List[str]:
    """``0N/A``: a NUMA affinity run into the ``GPU NUMA ID`` column, split at the ``N/A``."""
    if len(cells) >= len(columns) or not cells or columns[-1] != "gpu_numa":
        return cells
    last = cells[-1]
    if last.endswith(_NOT_AVAILABLE) and len(last) > len(_NOT_AVAILABLE):
        return [*cells[:-1], last[: -len(_NOT_AVAILABLE)], _NOT_AVAILABLE]
    return cells


def _ids(text: str) -> Optional[frozenset[int]]:
    return None if text == _NOT_AVAILABLE else parse_cpulist(text)


def _single_id(text: str) -> bool:
    return text == _NOT_AVAILABLE or text.isdigit()


def _fields(cells: List[str], columns: Sequence[str]) -> Tuple[Dict[str, str], Optional[str]]:
    """The row's affinity cells by column key, or why they cannot be told apart."""
    cells = _split_glued_id(cells, columns)
    if len(cells) == len(columns):
        return dict(zip(columns, cells)), None
    if len(cells) == len(columns) - 1 and columns[0] == "cpu" and len(columns) > 1:
        # One column short: an empty CPU Affinity (no CPU of the GPU's node in
        # this cpuset), unless the first cell is a CPU list run into the next.
        if cells and _single_id(cells[0]):
            return dict(zip(columns[1:], cells)), None
        return {}, (
            f"the affinity cells {' '.join(cells)!r} run together (a CPU list glued to the "
            "next column); the row is not read"
        )
    return {}, (
        f"{len(cells)} affinity cell(s) {' '.join(cells)!r} for {len(columns)} column(s) "
        f"({', '.join(columns)}); the row is not read"
    )


def _row(index: int, cells: List[str], columns: Sequence[str]) -> SmiGpu:
    at = 0
    while at < len(cells) and _LINK_CELLS.match(cells[at]):
        at += 1
    fields, problem = _fields(cells[at:], columns)
    if problem is not None:
        return SmiGpu(index, problem=problem)
    try:
        gpu_numa = fields.get("gpu_numa", _NOT_AVAILABLE)
        return SmiGpu(
            index,
            cpu_affinity=_ids(fields["cpu"]) if "cpu" in fields else None,
            numa_affinity=_ids(fields["numa"]) if "numa" in fields else None,
            gpu_numa_id=None if gpu_numa == _NOT_AVAILABLE else int(gpu_numa),
        )
    except (ListParseError, ValueError) as exc:
        return SmiGpu(index, problem=f"an affinity cell is not a list or N/A ({exc})")


def parse_topology(text: str) -> SmiTopology:
    """The ``GPU<n>`` rows of ``nvidia-smi topo -m`` output (see the module docstring).

    Raises:
        ValueError: the text has no header line naming ``CPU Affinity``, or
            no ``GPU<n>`` row after it (not a topology table).
    """
    columns: Tuple[str, ...] = ()
    gpus: List[SmiGpu] = []
    for line in text.splitlines():
        cells = line.split()
        if not columns:
            columns = _header_columns(line) if "CPU Affinity" in line else ()
            continue
        if cells and cells[0] == "Legend:":
            break
        match = _GPU_ROW.match(cells[0]) if cells else None
        if match is not None:
            gpus.append(_row(int(match.group(1)), cells[1:], columns))
    if not columns:
        raise ValueError("no header line naming 'CPU Affinity': not nvidia-smi topo -m output")
    if not gpus:
        raise ValueError("no GPU<n> row after the header: not nvidia-smi topo -m output")
    return SmiTopology(columns, tuple(gpus))


# ------------------------------------------------------------------ running


def _kill(process: subprocess.Popen[bytes]) -> None:
    try:
        process.kill()
    except OSError:  # already gone
        pass
    process.wait()


def _collect(
    process: subprocess.Popen[bytes], deadline: float, limit: int
) -> Tuple[bytes, bytes, Optional[str]]:
    """Its standard output and error until both end, or the reason it was stopped."""
    out: List[bytes] = []
    err: List[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        assert process.stdout is not None and process.stderr is not None
        selector.register(process.stdout, selectors.EVENT_READ, out)
        selector.register(process.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return b"", b"", "gave no complete answer within the time limit"
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                key.data.append(chunk)
                if key.data is out:
                    size += len(chunk)
                    if size > limit:
                        return b"", b"", f"printed more than {limit} bytes"
    return b"".join(out), b"".join(err)[:_MAX_ERROR], None


def _status(code: int, err: bytes) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"ended by {name}"
    first = err.decode("utf-8", "replace").strip().splitlines()
    said = f": {first[0][:200]}" if first else ""
    return f"exit status {code}{said}"


def run_topology(
    *, search_path: Optional[str] = None, timeout: float = TIMEOUT, limit: int = MAX_OUTPUT
) -> SmiRun:
    """Run ``nvidia-smi topo -m`` within the limits; never raises for the tool's sake.

    ``search_path`` is the ``PATH`` to look the tool up in (default: this
    process's).  The tool inherits this process's environment with
    ``LC_ALL=C`` (its messages in English); nothing from it reaches its argv.
    """
    tool = shutil.which(TOOL, path=search_path)
    if tool is None:
        return SmiRun(None, None, f"{TOOL} is not on PATH")
    began = time.monotonic()
    env = dict(os.environ, LC_ALL="C")
    try:
        process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [tool, *ARGUMENTS],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
    except OSError as exc:
        return SmiRun(tool, None, f"cannot run {tool}: {exc.strerror or exc}")
    try:
        out, err, stopped = _collect(process, began + timeout, limit)
        if stopped is None:
            try:
                code = process.wait(max(0.0, began + timeout - time.monotonic()))
            except subprocess.TimeoutExpired:  # its output ended, it did not
                stopped = "did not exit within the time limit"
        if stopped is not None:
            _kill(process)
    except BaseException:  # Ctrl-C while it runs: it is not left behind
        _kill(process)
        raise
    finally:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    seconds = time.monotonic() - began
    if stopped is not None:
        return SmiRun(tool, None, f"{tool} topo -m {stopped} ({timeout:g} s)", seconds)
    if code != 0:
        return SmiRun(tool, None, f"{tool} topo -m: {_status(code, err)}", seconds)
    try:
        return SmiRun(tool, out.decode("utf-8"), None, seconds)
    except UnicodeDecodeError as exc:
        return SmiRun(
            tool, None, f"{tool} topo -m printed bytes that are not UTF-8 ({exc})", seconds
        )
