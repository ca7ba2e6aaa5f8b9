"""This process's own state, as the kernel reports it: the one boundary (shell).

Following psutil's ``_pslinux``, one module owns every read of what the
kernel says about *this* process and its threads, and translates failures
once, here:

* the CPUs it may use (``sched_getaffinity``) and each thread's mask -- and
  setting a thread's mask, the one write, because it fails the same way;
* the memory nodes it may use: ``get_mempolicy(MPOL_F_MEMS_ALLOWED)``
  through :mod:`.libnuma` (imported on first use, so discovery costs no
  libnuma load until it asks), or ``Mems_allowed_list`` of
  ``/proc/self/status``;
* each thread's ``Cpus_allowed_list`` from ``/proc/self/task/T/status``;
* its cpuset (``/proc/self/cpuset`` and the cgroup file system, v1 or v2),
  and its cgroups as ``pynumabind report`` shows them (:func:`cgroup_limits`:
  the version, the cpuset's CPUs and memory nodes, the NVIDIA device nodes a
  v1 device cgroup lets it open);
* the files mapped into it (``/proc/self/maps``: which libnuma was loaded);
* its thread ids (``/proc/self/task``), names (``comm``) and start times
  (``stat``), so that a later restore can tell a thread from a new one that
  got its id;
* where its pages are when ``move_pages`` will not say
  (:mod:`.pages` decides what to make of it): each page's entry in
  ``/proc/self/pagemap`` (present or not, mapped once or not, and its frame
  number, which the kernel shows only to ``CAP_SYS_ADMIN``), and the pages
  per node of the mappings covering a range (``/proc/self/maps`` for where
  each mapping ends, ``/proc/self/numa_maps`` for its ``N<node>=<pages>``).
  Neither read faults a page in.

How errors are translated:

* A thread that has exited is not an error: ``ESRCH`` from a syscall, or
  ``ENOENT``/``ESRCH`` from a file under ``/proc/self/task/T`` (``ESRCH``
  when the file was opened before the thread went), becomes the "gone" value
  each function names -- ``None``, ``False`` or ``""``.
* Any other failure of a file becomes
  :class:`~pynumabind.errors.ProcessStateError` naming the file and the
  errno; a file that reads but does not parse, the same error naming the
  file and the text.  A failed syscall becomes
  :class:`~pynumabind.errors.NumaSyscallError` naming the call.  Both are
  :class:`~pynumabind.errors.PynumabindError` and ``OSError``.
* Nothing else in the package catches ``OSError`` around these reads or
  reads these files: ``tests/_os/test_proc_boundary.py`` fails when another
  module names ``/proc/self``, ``/proc/thread-self`` or ``/sys/fs/cgroup``
  or calls ``os.sched_getaffinity``/``os.sched_setaffinity``, and lists, each
  with its reason, the few modules that may catch ``OSError`` at all for
  files that are not this process's state: :mod:`.textfile` and :mod:`.kfd`
  (files of a sysfs tree a user may name: :class:`.textfile.SysfsReader`
  translates their errors for every sysfs reader), the machine-wide files
  below, ``dlopen`` in :mod:`.libnuma`, the snapshot file in
  :mod:`pynumabind.discovery`, and the CLI's own files, ``exec`` and
  worker processes.

Machine-wide files describe the machine, not the process, and each has its
own reader: ``/proc/meminfo`` :mod:`.meminfo`, ``/proc/cpuinfo``
:mod:`.cpuinfo`, ``/proc/bus/pci/devices`` :mod:`.pci`.
"""

from __future__ import annotations

import errno
import os

from .._record import record
from .._text import format_ids
from ..cpulist import parse_cpulist
from ..errors import ListParseError, NumaSyscallError, ProcessStateError
from .textfile import read_fd

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import AbstractSet, Dict, List, Optional, Sequence, Tuple

__all__ = [
    "MAPS",
    "NUMA_MAPS",
    "PAGEMAP",
    "STATUS",
    "TASK_DIR",
    "CgroupLimits",
    "DeviceCgroup",
    "cgroup_limits",
    "cpuset",
    "list_thread_ids",
    "mapped_file",
    "mapping_node_pages",
    "mems_allowed",
    "pagemap",
    "parse_device_rules",
    "process_affinity",
    "set_thread_affinity",
    "status_field",
    "status_mems_allowed",
    "thread_affinity",
    "thread_name",
    "thread_start_time",
    "thread_status_cpus",
]

TASK_DIR = "/proc/self/task"
STATUS = "/proc/self/status"
CPUSET = "/proc/self/cpuset"
CGROUPS = "/proc/self/cgroup"
MAPS = "/proc/self/maps"
CGROUP_ROOT = "/sys/fs/cgroup"
PAGEMAP = "/proc/self/pagemap"
NUMA_MAPS = "/proc/self/numa_maps"

#: The character-device major number of NVIDIA's GPU nodes (``/dev/nvidia<N>``);
#: minors 254 and 255 are ``nvidia-modeset`` and ``nvidiactl``, not GPUs.
NVIDIA_MAJOR = 195
_NVIDIA_GPU_MINORS = range(254)

#: errnos that mean "the thread has exited" (a syscall: ESRCH; a file: either).
_GONE = frozenset({errno.ESRCH, errno.ENOENT})

#: ``stat`` fields after the ``(comm)`` one: field 3 (state) is index 0, so
#: field 22, ``starttime``, is index 19.
_STARTTIME_INDEX = 22 - 3


def _failed(path: str, exc: OSError, what: str) -> ProcessStateError:
    code = exc.errno or errno.EIO
    name = errno.errorcode.get(code, str(code))
    return ProcessStateError(
        f"cannot read {what} from {path}: {name} ({os.strerror(code)})", path=path, err=code
    )


def _read(path: str, what: str, *, gone_ok: bool) -> Optional[str]:
    """The text of a /proc file; None when ``gone_ok`` and the thread has exited.

    Read raw to the end (:func:`.textfile.read_fd`), not through a text file
    object: a bind reads each thread's name, and this takes half the time
    (the same text, decoded as UTF-8 with replacement, the same errors).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = read_fd(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if gone_ok and exc.errno in _GONE:
            return None
        raise _failed(path, exc, what) from exc
    assert data is not None  # no limit
    return data.decode("utf-8", "replace")


# -------------------------------------------------------------- affinity


def process_affinity() -> frozenset[int]:
    """The calling thread's CPU mask: the CPUs this process may use.

    A refusal (a seccomp filter or LSM policy denying ``sched_getaffinity``)
    is a :class:`~pynumabind.errors.NumaSyscallError` naming the call.
    """
    try:
        return frozenset(os.sched_getaffinity(0))
    except OSError as exc:
        raise NumaSyscallError(
            exc.errno or errno.EIO,
            "sched_getaffinity(0), which reads the CPUs this process may use,",
        ) from exc


def thread_affinity(tid: int) -> Optional[frozenset[int]]:
    """Thread ``tid``'s CPU mask; ``None`` when it has exited."""
    try:
        return frozenset(os.sched_getaffinity(tid))
    except OSError as exc:
        if exc.errno in _GONE:
            return None
        raise NumaSyscallError(exc.errno or errno.EIO, f"sched_getaffinity(thread {tid})") from exc


def set_thread_affinity(tid: int, cpus: AbstractSet[int]) -> bool:
    """Put thread ``tid`` on ``cpus``; False when it has exited.

    Any other failure (EINVAL: no CPU of ``cpus`` in its cpuset; EPERM) is a
    :class:`~pynumabind.errors.NumaSyscallError` carrying the errno.
    """
    try:
        os.sched_setaffinity(tid, cpus)
    except OSError as exc:
        if exc.errno in _GONE:
            return False
        raise NumaSyscallError(
            exc.errno or errno.EINVAL,
            f"sched_setaffinity(thread {tid}, CPUs {format_ids(frozenset(cpus))})",
        ) from exc
    return True


def mems_allowed() -> frozenset[int]:
    """Memory nodes this thread may use (cpuset ``mems``), read fresh.

    ``get_mempolicy(MPOL_F_MEMS_ALLOWED)`` through libnuma: a
    :class:`~pynumabind.errors.NumaSyscallError` or
    :class:`~pynumabind.errors.LibnumaUnavailableError` when it fails (see
    :func:`status_mems_allowed` for the file the kernel also shows).
    """
    from . import libnuma as _libnuma

    return _libnuma.get_mems_allowed()


# ---------------------------------------------------------------- status


def status_field(name: str, path: str = STATUS) -> str:
    """The value of line ``name:`` of a ``status`` file, stripped."""
    text = _read(path, name, gone_ok=False)
    assert text is not None
    value = _field(text, name)
    if value is None:
        raise ProcessStateError(f"no {name} line in {path}", path=path)
    return value


def _field(text: str, name: str) -> Optional[str]:
    prefix = f"{name}:"
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return None


def _ids(text: str, path: str, what: str) -> frozenset[int]:
    try:
        return parse_cpulist(text.strip())
    except ListParseError as exc:
        raise ProcessStateError(f"malformed {what} in {path}: {exc}", path=path) from exc


def status_mems_allowed() -> frozenset[int]:
    """``Mems_allowed_list`` of ``/proc/self/status``: the cpuset's memory nodes."""
    return _ids(status_field("Mems_allowed_list"), STATUS, "Mems_allowed_list")


def thread_status_cpus() -> Dict[int, frozenset[int]]:
    """Each live thread's ``Cpus_allowed_list`` as ``/proc/self/task/T/status`` shows it.

    An independent read of the masks (not ``sched_getaffinity``); threads
    that exit while they are read are left out.
    """
    out: Dict[int, frozenset[int]] = {}
    for tid in list_thread_ids():
        path = f"{TASK_DIR}/{tid}/status"
        text = _read(path, "Cpus_allowed_list", gone_ok=True)
        if text is None:
            continue  # exited meanwhile
        value = _field(text, "Cpus_allowed_list")
        if value is None:
            raise ProcessStateError(f"no Cpus_allowed_list line in {path}", path=path)
        out[tid] = _ids(value, path, "Cpus_allowed_list")
    return out


# ---------------------------------------------------------------- cpuset


def cpuset() -> Optional[Tuple[str, frozenset[int]]]:
    """This process's cpuset path and its effective CPUs (cgroup v1 or v2).

    ``None`` when the kernel shows no cpuset for it (no ``/proc/self/cpuset``,
    or neither cgroup file exists); unreadable or malformed files are a
    :class:`~pynumabind.errors.ProcessStateError`.
    """
    text = _read(CPUSET, "the cpuset", gone_ok=True)
    if text is None:
        return None
    path = text.strip()
    candidates = (
        f"{CGROUP_ROOT}/cpuset{path}/cpuset.effective_cpus",  # v1
        f"{CGROUP_ROOT}{path}/cpuset.cpus.effective",  # v2
    )
    for candidate in candidates:
        found = _read(candidate, "the cpuset's CPUs", gone_ok=True)
        if found is not None:
            return path, _ids(found, candidate, "CPU list")
    return None


@record(frozen=True)
class DeviceCgroup:
    """What a cgroup v1 device controller lets this process open, as far as GPUs go.

    ``everything``: a rule allows every character device (``a *:*``, ``c *:*``)
    or every NVIDIA one (``c 195:*``); otherwise ``nvidia_gpus`` are the minor
    numbers of the ``/dev/nvidia<N>`` nodes it allows.
    """

    path: str
    everything: bool
    nvidia_gpus: frozenset[int]

    def __init__(self, path: str, everything: bool, nvidia_gpus: frozenset[int]) -> None:
        self.__dict__.update(path=path, everything=everything, nvidia_gpus=nvidia_gpus)


@record(frozen=True)
class CgroupLimits:
    """This process's cgroups, as the kernel shows them (see :func:`cgroup_limits`).

    ``version``: ``"v2"``, ``"v1"``, ``"hybrid"`` (v1 controllers beside a v2
    hierarchy) or ``"none"``; ``paths``: controller -> cgroup path (``""``:
    the v2 hierarchy).  The cpuset fields are ``None`` when no cpuset file
    was found (``cpuset_file`` names the one read); ``devices`` is ``None``
    when the device controller is not a v1 one (v2 filters devices with eBPF
    programs, which cannot be read back from a file).
    """

    version: str
    paths: Dict[str, str]
    cpuset_cpus: Optional[frozenset[int]] = None
    cpuset_mems: Optional[frozenset[int]] = None
    cpuset_file: Optional[str] = None
    devices: Optional[DeviceCgroup] = None

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        version: str,
        paths: Dict[str, str],
        cpuset_cpus: Optional[frozenset[int]] = None,
        cpuset_mems: Optional[frozenset[int]] = None,
        cpuset_file: Optional[str] = None,
        devices: Optional[DeviceCgroup] = None,
    ) -> None:
        self.__dict__.update(
            version=version,
            paths=paths,
            cpuset_cpus=cpuset_cpus,
            cpuset_mems=cpuset_mems,
            cpuset_file=cpuset_file,
            devices=devices,
        )


def _cgroup_paths(text: str) -> Dict[str, str]:
    """``/proc/self/cgroup`` as controller -> path; the v2 line's controller is ``""``."""
    paths: Dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            raise ProcessStateError(f"malformed line {line[:80]!r} in {CGROUPS}", path=CGROUPS)
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller.removeprefix("name=") if controller else ""] = path
    return paths


def _cgroup_version(paths: Dict[str, str]) -> str:
    v1 = [c for c in paths if c]
    if v1:
        return "hybrid" if "" in paths else "v1"
    return "v2" if "" in paths else "none"


def _cpuset_files(paths: Dict[str, str]) -> List[Tuple[str, str]]:
    """(CPUs file, memory nodes file) candidates: v1's controller, then v2's hierarchy."""
    found = []
    if "cpuset" in paths:
        base = f"{CGROUP_ROOT}/cpuset{paths['cpuset']}".rstrip("/")
        found.append((f"{base}/cpuset.effective_cpus", f"{base}/cpuset.effective_mems"))
    if "" in paths:
        base = f"{CGROUP_ROOT}{paths['']}".rstrip("/")
        found.append((f"{base}/cpuset.cpus.effective", f"{base}/cpuset.mems.effective"))
    return found


def parse_device_rules(text: str, path: str) -> DeviceCgroup:
    """A v1 ``devices.list`` (``c 195:0 rwm`` per line) as the GPUs it allows."""
    minors = set()
    for line in text.split("\n"):
        fields = line.split()
        if len(fields) != 3:
            continue
        kind, number, _access = fields
        major, _, minor = number.partition(":")
        if kind == "a" or (kind == "c" and major == "*"):
            return DeviceCgroup(path, True, frozenset())
        if kind != "c" or major != str(NVIDIA_MAJOR):
            continue
        if minor == "*":
            return DeviceCgroup(path, True, frozenset())
        if minor.isdigit() and int(minor) in _NVIDIA_GPU_MINORS:
            minors.add(int(minor))
    return DeviceCgroup(path, False, frozenset(minors))


def cgroup_limits() -> CgroupLimits:
    """This process's cgroups: version, paths, the cpuset's sets, the v1 device rules.

    Files the kernel does not show are ``None`` fields; an unreadable or
    malformed one is a :class:`~pynumabind.errors.ProcessStateError` naming it.
    """
    text = _read(CGROUPS, "the cgroups", gone_ok=True)
    if text is None:
        return CgroupLimits("none", {})
    paths = _cgroup_paths(text)
    limits = CgroupLimits(_cgroup_version(paths), paths)
    for cpus_file, mems_file in _cpuset_files(paths):
        cpus = _read(cpus_file, "the cpuset's CPUs", gone_ok=True)
        mems = _read(mems_file, "the cpuset's memory nodes", gone_ok=True)
        if cpus is not None and mems is not None:
            limits = CgroupLimits(
                limits.version,
                paths,
                _ids(cpus, cpus_file, "CPU list"),
                _ids(mems, mems_file, "node list"),
                cpus_file,
            )
            break
    if "devices" in paths:
        rules_file = f"{CGROUP_ROOT}/devices{paths['devices']}".rstrip("/") + "/devices.list"
        rules = _read(rules_file, "the device cgroup's rules", gone_ok=True)
        if rules is not None:
            limits = CgroupLimits(
                limits.version,
                paths,
                limits.cpuset_cpus,
                limits.cpuset_mems,
                limits.cpuset_file,
                parse_device_rules(rules, rules_file),
            )
    return limits


def mapped_file(name: str) -> Optional[str]:
    """The path of the first file mapped into this process whose name starts with ``name``.

    ``/proc/self/maps``, read once; ``None`` when none is mapped.
    """
    text = _read(MAPS, "the mapped files", gone_ok=False)
    assert text is not None
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and os.path.basename(fields[5]).startswith(name):
            return fields[5]
    return None


# --------------------------------------------------------------- threads


def list_thread_ids() -> List[int]:
    """Thread ids of this process, ascending."""
    try:
        entries = os.listdir(TASK_DIR)
    except OSError as exc:
        raise _failed(TASK_DIR, exc, "this process's threads") from exc
    return sorted(int(entry) for entry in entries if entry.isascii() and entry.isdigit())


def thread_name(tid: int) -> str:
    """The thread's ``comm`` (15 bytes at most); ``""`` when it has exited."""
    text = _read(f"{TASK_DIR}/{tid}/comm", "the thread's name", gone_ok=True)
    return "" if text is None else text.rstrip("\n")


def thread_start_time(tid: int) -> Optional[int]:
    """When thread ``tid`` started, in clock ticks after boot; ``None`` when it has exited.

    Field 22 (``starttime``) of ``/proc/self/task/T/stat``.  A thread id the
    kernel gives again to a new thread comes with a later start time, so a
    tid and its start time name one thread.  The ``comm`` field may hold
    spaces and parentheses, so fields are counted after its last ``)``.
    """
    path = f"{TASK_DIR}/{tid}/stat"
    text = _read(path, "the thread's start time", gone_ok=True)
    if text is None:
        return None
    fields = text[text.rfind(")") + 1 :].split()
    if ")" not in text or len(fields) <= _STARTTIME_INDEX:
        raise ProcessStateError(f"malformed {path}: {text[:80]!r}", path=path)
    value = fields[_STARTTIME_INDEX]
    if not (value.isascii() and value.isdigit()):
        raise ProcessStateError(f"malformed starttime {value!r} in {path}", path=path)
    return int(value)


# ----------------------------------------------------------------- pages


def _page_size() -> int:
    """The base page size (``mmap.PAGESIZE``, without loading ``mmap`` into every bind)."""
    return os.sysconf("SC_PAGE_SIZE")


def pagemap(addresses: Sequence[int]) -> List[int]:
    """The 64-bit ``/proc/self/pagemap`` entry of the page holding each address.

    Bit 63: present (a page the balancer marked for a NUMA-hinting fault is
    present too); bit 56: mapped by this process only; bits 0-54: the frame
    number, 0 unless the reader has ``CAP_SYS_ADMIN``.  Reading it faults
    nothing in.  Runs of consecutive pages are read with one ``pread`` each.
    A failure is a :class:`~pynumabind.errors.ProcessStateError`.
    """
    page = _page_size()
    wanted = sorted({address // page for address in addresses})
    found: Dict[int, int] = {}
    try:
        fd = os.open(PAGEMAP, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise _failed(PAGEMAP, exc, "where this process's pages are") from exc
    try:
        for first, count in runs(wanted):
            data = os.pread(fd, 8 * count, 8 * first)
            if len(data) != 8 * count:
                raise ProcessStateError(
                    f"short read of {PAGEMAP}: {len(data)} of {8 * count} bytes", path=PAGEMAP
                )
            entries = memoryview(data).cast("Q")  # native 64-bit words, as the kernel writes
            found.update(zip(range(first, first + count), entries.tolist()))
    except OSError as exc:
        raise _failed(PAGEMAP, exc, "where this process's pages are") from exc
    finally:
        os.close(fd)
    return [found[address // page] for address in addresses]


def runs(pages: List[int]) -> List[Tuple[int, int]]:
    """(first, count) of each run of consecutive numbers in the sorted ``pages``."""
    runs: List[Tuple[int, int]] = []
    for number in pages:
        if runs and runs[-1][0] + runs[-1][1] == number:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((number, 1))
    return runs


def mapping_node_pages(start: int, end: int) -> Optional[Dict[int, int]]:
    """Pages per node of the mappings that make up ``[start, end)`` exactly, or ``None``.

    Each mapping (a line of ``/proc/self/maps``) that overlaps the range must
    lie inside it, and together they must cover it with no gap: then the
    ``N<node>=<pages>`` counts of their ``/proc/self/numa_maps`` lines (in
    pages of this size: a hugetlb mapping counts its huge pages) are the
    range's.  ``None`` when the mappings stick out of the range, or a mapping
    is gone from one file to the other (another thread changed them).  The
    kernel walks every mapping of the process to write ``numa_maps``: a read
    costs in proportion to the process's memory.  A failure to read is a
    :class:`~pynumabind.errors.ProcessStateError`.
    """
    maps = _read(MAPS, "this process's mappings", gone_ok=False)
    assert maps is not None
    starts: List[int] = []
    covered = start
    for line in maps.splitlines():
        low, high = _extent(line)
        if high <= start or low >= end:
            continue
        if low != covered or high > end:
            return None  # sticks out of the range, or leaves a gap
        starts.append(low)
        covered = high
    if covered != end:
        return None
    numa = _read(NUMA_MAPS, "this process's pages per node", gone_ok=False)
    assert numa is not None
    return _numa_counts(numa, starts)


def _extent(line: str) -> Tuple[int, int]:
    """(start, end) of one ``/proc/self/maps`` line (``7f0000-7f1000 rw-p ...``)."""
    low, _, high = line.split(" ", 1)[0].partition("-")
    try:
        return int(low, 16), int(high, 16)
    except ValueError:
        raise ProcessStateError(f"malformed line in {MAPS}: {line[:80]!r}", path=MAPS) from None


def _numa_counts(text: str, starts: List[int]) -> Optional[Dict[int, int]]:
    """The summed ``N<node>=`` page counts of the ``numa_maps`` lines starting at ``starts``."""
    wanted = set(starts)
    counts: Dict[int, int] = {}
    seen = 0
    for line in text.splitlines():
        fields = line.split()
        if not fields or _hex(fields[0]) not in wanted:
            continue
        seen += 1
        scale = 1
        for field in fields:
            size = field[len("kernelpagesize_kB=") :]
            if field.startswith("kernelpagesize_kB=") and size.isascii() and size.isdigit():
                scale = max(1, int(size) * 1024 // _page_size())
        for field in fields:
            name, _, value = field.partition("=")
            if name[:1] == "N" and name[1:].isdigit() and value.isdigit():
                counts[int(name[1:])] = counts.get(int(name[1:]), 0) + int(value) * scale
    return counts if seen == len(wanted) else None


def _hex(text: str) -> Optional[int]:
    """A ``numa_maps`` line's start address; None for anything else."""
    try:
        return int(text, 16)
    except ValueError:
        return None
