"""Helpers shared by the guest-side library tests (no pytest import: spawned workers use it).

Everything here reads the kernel directly (``/proc``, ``sched_getaffinity``, ``move_pages``
through ``pynumabind._os.libnuma``), so a test compares what the library claims with what the
guest kernel reports, not with the library's own bookkeeping.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# Standard topology (tests/vm/harness.py STANDARD_TOPOLOGY), spelled out for readable asserts.
NODE0_CPUS = frozenset({0, 1})
NODE1_CPUS = frozenset({2, 3})
ALL_CPUS = NODE0_CPUS | NODE1_CPUS
ALL_NODES = frozenset({0, 1, 2})

# The bochs-display devices behind the pxb expanders on node 1 and on the memory-only node 2.
PCI_VENDOR = 0x1234
PCI_CLASS = "0x0380"
PCI_ADDRESS = "0000:21:00.0"
PCI_ADDRESS_NODE2 = "0000:41:00.0"

GUEST_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(GUEST_DIR)))


def numa_balancing_hides_pages() -> bool:
    """Whether ``move_pages`` here reads a page waiting for a NUMA-hinting fault as not present.

    That is this guest booted with automatic NUMA balancing on a 6.1 kernel.  6.1's
    ``move_pages`` looks pages up with ``follow_page``, which takes a PROT_NONE hinting entry
    for no page (-ENOENT); 6.12's looks them up with ``folio_walk`` and reports the node (both
    measured in these guests: on 6.12 the balancer marked the pages and the status still read
    the node).
    """
    boot = os.environ.get("PYNUMABIND_VM_BOOT")  # harness.BOOT_ENV (JSON)
    if not boot:
        return False
    facts = json.loads(boot)
    return bool(facts["numa_balancing"]) and facts["kernel"] == "6.1"


def task_affinities() -> Dict[int, frozenset[int]]:
    """Every thread of this process and its CPU mask, as the kernel reports it now."""
    out: Dict[int, frozenset[int]] = {}
    for entry in os.listdir("/proc/self/task"):
        try:
            out[int(entry)] = frozenset(os.sched_getaffinity(int(entry)))
        except (ProcessLookupError, FileNotFoundError):
            pass  # exited while we looked
    return out


def status_field(name: str, pid: str = "self") -> str:
    """One field of ``/proc/<pid>/status`` (``Cpus_allowed_list``, ``Mems_allowed_list``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    raise KeyError(name)


def touch_pages(pages: int = 32) -> mmap.mmap:
    """Fresh anonymous pages, each faulted in now under the calling thread's memory policy."""
    region = mmap.mmap(-1, pages * mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for index in range(pages):
        region[index * mmap.PAGESIZE] = 1
    return region


SETTLE_TRIES = 5
SETTLE_PAUSE = 0.05  # seconds


def page_nodes(region: mmap.mmap) -> List[int]:
    """Node of each page of ``region``: :func:`nodes_at` its pages."""
    import ctypes

    anchor = ctypes.c_char.from_buffer(region)
    start = ctypes.addressof(anchor)
    del anchor
    page = mmap.PAGESIZE
    return nodes_at(list(range(start - start % page, start + len(region), page)))


def nodes_at(addresses: List[int]) -> List[int]:
    """Node of the page at each address, as the kernel has it (this is the tests' oracle).

    ``move_pages(nodes=NULL)`` first.  A page the kernel is migrating at that instant
    (compaction, NUMA balancing) reads as ``-ENOENT``, seen once in about ten guest runs, so a
    negative answer is asked again for a moment; and with automatic NUMA balancing on, 6.1's
    ``move_pages`` reads a written page the balancer marked for a hinting fault as not there
    until it is touched (seen: a whole test region of 16 pages, under load), so a page still
    missing is looked up in the page table, as root may: its frame in ``/proc/self/pagemap``,
    the memory block holding the frame in ``/sys/devices/system/node/node<N>/memory<M>``.  The
    shared zero page (``KPF_ZERO_PAGE`` in ``/proc/kpageflags``) stays not there.  Written
    here apart from the library's own lookup, so that it checks the library.
    """
    from pynumabind._os import libnuma as _libnuma

    found: List[int] = []
    for index in range(0, len(addresses), _libnuma.MOVE_PAGES_CHUNK):
        batch = addresses[index : index + _libnuma.MOVE_PAGES_CHUNK]
        _, status = _libnuma.move_pages_status(batch)
        for attempt in range(SETTLE_TRIES):
            for i in [i for i, where in enumerate(status) if where < 0]:
                status[i] = _page_table_node(batch[i], status[i])
            missing = [i for i, where in enumerate(status) if where < 0]
            if not missing or attempt == SETTLE_TRIES - 1:
                break
            time.sleep(SETTLE_PAUSE)
            _, again = _libnuma.move_pages_status([batch[i] for i in missing])
            for i, where in zip(missing, again):
                status[i] = where
        found += status
    return found


def _frame(address: int) -> Optional[int]:
    """The frame of the present page at ``address`` (``/proc/self/pagemap``, root), or None."""
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(address // mmap.PAGESIZE * 8)
        entry = int.from_bytes(pagemap.read(8), "little")
    frame = entry & ((1 << 55) - 1)
    return frame if entry >> 63 and frame else None


def _page_flags(frame: int) -> int:
    """The ``/proc/kpageflags`` word of ``frame`` (root)."""
    with open("/proc/kpageflags", "rb") as flags:
        flags.seek(frame * 8)
        return int.from_bytes(flags.read(8), "little")


def _page_table_node(address: int, was: int) -> int:
    """The node of the present page at ``address`` by its frame (root); ``was`` if not present."""
    frame = _frame(address)
    if frame is None or _page_flags(frame) >> 24 & 1:  # KPF_ZERO_PAGE
        return was
    with open("/sys/devices/system/memory/block_size_bytes", encoding="ascii") as handle:
        block = frame * mmap.PAGESIZE // int(handle.read(), 16)
    nodes = "/sys/devices/system/node"
    for name in os.listdir(nodes):
        if name.startswith("node") and os.path.exists(f"{nodes}/{name}/memory{block}"):
            return int(name[4:])
    return was


def fresh_page_nodes(pages: int = 32) -> List[int]:
    region = touch_pages(pages)
    try:
        return page_nodes(region)
    finally:
        region.close()


def mempolicy() -> Tuple[str, List[int]]:
    """The calling thread's memory policy as (``MPOL_*`` name, sorted nodes)."""
    from pynumabind._os import libnuma as _libnuma

    policy = _libnuma.get_mempolicy()
    return policy.kernel_policy, sorted(policy.nodes)


class Sleepers:
    """Threads started before a bind, parked until :meth:`stop` (thread pools stand-in)."""

    def __init__(self, count: int, pin: Optional[frozenset[int]] = None) -> None:
        self._stop = threading.Event()
        self._ready = threading.Barrier(count + 1)
        self.tids: List[int] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(pin,), name=f"sleeper-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()
        self._ready.wait(timeout=30)

    def _run(self, pin: Optional[frozenset[int]]) -> None:
        if pin is not None:
            os.sched_setaffinity(0, pin)
        with self._lock:
            self.tids.append(threading.get_native_id())
        self._ready.wait(timeout=30)
        self._stop.wait(timeout=120)

    def affinities(self) -> Dict[int, frozenset[int]]:
        return {tid: frozenset(os.sched_getaffinity(tid)) for tid in self.tids}

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def spawned_bind_worker(rank: int, nprocs: int, conn: Any) -> None:
    """Target of the multiprocessing-spawn workers: bind as a real worker would, report back.

    The report is what the kernel says after ``bind_current_process``: every thread's mask
    (a thread started before the bind included), the memory policy, where fresh pages landed,
    and the library's own verify().
    """
    try:
        early = Sleepers(1)  # e.g. a framework thread started before the worker binds
        from pynumabind import bind_current_process

        binding = bind_current_process(
            rank, nprocs=nprocs, mode="exclusive", policy="bind", environ={}
        )
        late = Sleepers(1)  # started after: inherits the bound CPUs
        check = binding.verify()
        report = {
            "rank": rank,
            "pid": os.getpid(),
            "plan_cpus": sorted(binding.plan.cpus or ()) if binding.plan else None,
            "plan_mems": sorted(binding.plan.mems) if binding.plan else None,
            "tasks": {str(t): sorted(c) for t, c in task_affinities().items()},
            "early": sorted(next(iter(early.affinities().values()))),
            "late": sorted(next(iter(late.affinities().values()))),
            "mempolicy": mempolicy(),
            "pages": fresh_page_nodes(16),
            "verify_ok": check.ok,
            "verify_problems": list(check.problems),
        }
        early.stop()
        late.stop()
    except BaseException as exc:  # report, never hang the parent
        report = {"rank": rank, "error": f"{type(exc).__name__}: {exc}"}
    conn.send(report)
    conn.close()


def run_python(
    code: str,
    args: Sequence[str] = (),
    *,
    timeout: float = 120,
    before_start: Optional[Callable[[subprocess.Popen[str]], None]] = None,
) -> Dict[str, Any]:
    """Run ``code`` in a fresh interpreter (this one, same import path); return its JSON.

    The child must print one JSON object as its last stdout line.  With ``before_start``, the
    child waits for a line on stdin, so the parent can act on it first (``sched_setaffinity``
    by pid) and then let it go.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    argv = [sys.executable, "-c", textwrap.dedent(code), *args]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if before_start else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    if before_start is not None:
        assert proc.stdin is not None
        try:
            before_start(proc)
        finally:
            proc.stdin.write("go\n")
            proc.stdin.close()
            proc.stdin = None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"child timed out:\n{out}\n{err}") from None
    if proc.returncode != 0:
        raise AssertionError(f"child exited {proc.returncode}:\nstdout:\n{out}\nstderr:\n{err}")
    lines = out.strip().splitlines()
    assert lines, f"child printed nothing; stderr:\n{err}"
    result: Dict[str, Any] = json.loads(lines[-1])
    result["_stderr"] = err
    return result


def is_thp(address: int) -> Optional[bool]:
    """Whether the page at ``address`` (this process) is part of a transparent huge page.

    Read from ``/proc/self/pagemap`` (its frame) and ``/proc/kpageflags`` (``KPF_THP``), both
    root-only; None when the page is not present.
    """
    frame = _frame(address)
    return None if frame is None else bool(_page_flags(frame) >> 22 & 1)  # KPF_THP


# ---------------------------------------------------------------- weighted interleave

#: The kernel's system-wide weighted-interleave weights (Linux 6.9+), one file a node.
WEIGHTS_DIR = "/sys/kernel/mm/mempolicy/weighted_interleave"


def kernel_weights() -> Dict[int, int]:
    """The kernel's weight of each node, read from its files."""
    return {
        int(name[4:]): int(open(os.path.join(WEIGHTS_DIR, name)).read())
        for name in os.listdir(WEIGHTS_DIR)
        if name.startswith("node") and name[4:].isdigit()
    }


def set_kernel_weights(weights: Dict[int, int]) -> None:
    """Write the kernel's weights (root): every process on the guest follows them."""
    for node, weight in weights.items():
        with open(os.path.join(WEIGHTS_DIR, f"node{node}"), "w") as handle:
            handle.write(f"{weight}\n")


def page_counts(region: mmap.mmap) -> Dict[int, int]:
    """Pages of ``region`` per node, as ``move_pages`` reports each (negative: ``-errno``)."""
    counts: Dict[int, int] = {}
    for node in page_nodes(region):
        counts[node] = counts.get(node, 0) + 1
    return counts


def check_weights_3_to_1_on_64_mib() -> None:
    """``bind_memory`` of 64 MiB over nodes 0 and 2 at 3:1: 75% +- 5% of its pages on node 0.

    The buffer is written first on node 1, so every page must move; where the pages are is
    read back page by page with ``move_pages``, not taken from the library's report.  Exact
    weights are runs bound with ``MPOL_BIND``, so this holds on any kernel, with or without
    weighted interleave.
    """
    from pynumabind._os import libnuma as _libnuma
    from pynumabind.binding.placement import bind_memory

    pages = (64 << 20) // mmap.PAGESIZE
    region = mmap.mmap(-1, pages * mmap.PAGESIZE)
    try:
        _libnuma.set_mempolicy(_libnuma.MPOL_BIND, {1})
        try:
            region[:: mmap.PAGESIZE] = b"\1" * pages  # one byte a page, one C loop (TCG)
        finally:
            _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
        result = bind_memory(region, policy="weighted-interleave", weights={0: 3, 2: 1})
        counts = page_counts(region)
        assert set(counts) == {0, 2}, counts  # every page moved, none lost, none elsewhere
        assert sum(counts.values()) == pages
        assert 0.70 <= counts[0] / pages <= 0.80, counts
        assert result.kernel_policy == "MPOL_BIND" and result.runs > 1
        assert result.weights == {0: 3, 2: 1} and result.in_proportion is True
        assert result.complete and result.pages_per_node == counts, result.summary()
    finally:
        region.close()


#: A worker started by ``pynumabind exec``: it writes 64 MiB and prints where each page is.
SPLIT_CHILD = """
import json, mmap
from pynumabind._os import libnuma as _libnuma
pages = (64 << 20) // mmap.PAGESIZE
region = mmap.mmap(-1, pages * mmap.PAGESIZE)
region[:: mmap.PAGESIZE] = b"\\1" * pages
counts = {}
for node in _libnuma.page_nodes(region):
    counts[node] = counts.get(node, 0) + 1
policy = _libnuma.get_mempolicy()
print(json.dumps({"counts": counts, "pages": pages,
                  "policy": [policy.kernel_policy, sorted(policy.nodes)]}))
"""


def exec_split(*flags: str) -> Tuple[Dict[str, Any], str]:
    """``pynumabind exec FLAGS -- SPLIT_CHILD``: the child's report and exec's standard error."""
    argv = [
        sys.executable, "-m", "pynumabind", "exec", "--rank", "0", "--nprocs", "1",
        "--mode", "none", *flags, "--", sys.executable, "-c", SPLIT_CHILD,
    ]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    report: Dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["counts"] = {int(node): count for node, count in report["counts"].items()}
    return report, proc.stderr
