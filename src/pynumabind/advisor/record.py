"""The advice record on disk: where it lives, saving it, loading it, and mode ``advised``.

``pynumabind advise --save`` (:meth:`Advice.save`) measures once per machine
and writes a record (:mod:`pynumabind.advisor.document` says what is in it
and which differences make it stale); mode ``advised`` reads it in every
worker and binds as it says (:func:`resolve_advised`).  This module reads
files and the machine but measures nothing, so the binding may import it:
a worker never measures (eight workers measuring at once disturb each
other, and delay start-up).

Where the record lives
----------------------
One rule, for the writer and every reader:

1. ``PYNUMABIND_ADVICE``, when set (not blank): that file, and only that.
2. Otherwise the readers take the first of these that exists:

   a. the per-user file ``$XDG_CACHE_HOME/pynumabind/advice.json``
      (``~/.cache/pynumabind/advice.json`` when ``XDG_CACHE_HOME`` is unset
      or not absolute), so a user can measure for themselves;
   b. the system-wide file :data:`SYSTEM_PATH`
      (``/var/lib/pynumabind/advice.json``), which root writes once per
      machine, for workers that run under other accounts (a service user, a
      container's random uid).

   The writer writes the system-wide file when run as root, else the
   per-user one.

The first file found is the record: a stale per-user file is reported as
stale, not skipped for the system-wide one (which file decides never depends
on what is in it).

Saving
------
The write is atomic: the record goes to a temporary file in the same
directory (created, mode 0755, when missing), is flushed to disk, made
readable by every account (0644), and renamed over the target, so a worker
reads the old record or the new one, never half of one.  A file already at
the path that is not an advice record (no ``"record": "pynumabind
advice"``: a directory, a FIFO, someone's JSON, a typo'd path to a config
file) is never overwritten: :class:`~pynumabind.errors.AdviceRecordError`.

Mode ``advised``
----------------
:func:`resolve_advised` turns the record into plain values before the pure
planner runs: a CPU mode and memory policy, the topology with each GPU the
measurement moved on its measured node, and reasons:

* **bind**: the recommended mode and policy; per GPU (matched by PCI bus
  id, so any ``CUDA_VISIBLE_DEVICES`` works), the node its copies were
  fastest from.  Where that is not the node the GPU reports, a reason says
  so with the measured ratio.  No GPU measured: the memory verdict alone.
* **do not bind**: mode ``none`` and policy ``none``, and
  :attr:`Advised.not_bound` quoting the record; the binding then leaves the
  process alone and says so.
* **no record, a stale one, or one that cannot be read**: one WARNING per
  process naming the file, what differs (or what is wrong) and the command
  to run (``pynumabind advise --save``), then the default mode's plan.

A memory policy given together with mode ``advised`` is a ConfigError: the
record decides both.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import stat
import tempfile
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, List, Mapping, Optional, Tuple

from .._os import SYSFS_ROOT
from .._version import __version__
from ..errors import AdviceRecordError, ConfigError, PynumabindError
from ..model import CpuMode, Gpu, MemoryPolicy, Plan, Topology
from ..options import ASCII_SPACE, Options, shown
from . import rule as _rule
from .document import (
    MAX_RECORD_BYTES,
    Machine,
    Record,
    is_record,
    machine_of,
    parse_record,
    record_dict,
    staleness,
)

if TYPE_CHECKING:  # pragma: no cover
    from .rule import GpuAdvice

__all__ = [
    "ADVICE_VARIABLE",
    "SAVE_COMMAND",
    "SYSTEM_PATH",
    "Advice",
    "Advised",
    "advice_path",
    "load_advice",
    "load_record",
    "read_paths",
    "refuse_foreign",
    "resolve_advised",
    "save_path",
    "save_record",
    "this_machine",
]

log = logging.getLogger(__name__)

ADVICE_VARIABLE = "PYNUMABIND_ADVICE"
SYSTEM_PATH = "/var/lib/pynumabind/advice.json"
USER_FILE = os.path.join("pynumabind", "advice.json")
SAVE_COMMAND = "pynumabind advise --save"

_WARNED: set[str] = set()  # fallback warnings already logged in this process


class Advice(_rule.Advice):
    """What :func:`pynumabind.advise` measured and recommends, and how to keep it.

    The values are :class:`pynumabind.advisor.rule.Advice`'s (pure); this
    class adds :meth:`save`, which needs the file system and the machine.
    """

    def save(self, path: Optional[str] = None) -> str:
        """Write the record (see the module docstring); returns the absolute path written.

        ``path`` defaults to the path rule's (``PYNUMABIND_ADVICE``, else the
        system-wide file as root, the per-user one otherwise).
        """
        return save_record(self, path)


# ------------------------------------------------------------------ paths


def advice_path(environ: Mapping[str, str]) -> Optional[str]:
    """``PYNUMABIND_ADVICE``, or None when unset or blank; a bad value is an AdviceRecordError."""
    value = environ.get(ADVICE_VARIABLE)
    if value is None or not value.strip(ASCII_SPACE):
        return None
    text = value.strip(ASCII_SPACE)
    if "\0" in text:
        raise AdviceRecordError(f"invalid {ADVICE_VARIABLE}={shown(value)}: a NUL in a file name")
    if text.endswith(os.sep):
        raise AdviceRecordError(
            f"invalid {ADVICE_VARIABLE}={shown(value)}: it names a directory; name the file, "
            "such as /var/lib/pynumabind/advice.json"
        )
    return text


def user_path(environ: Mapping[str, str]) -> Optional[str]:
    """The per-user record, or None when this account has no home directory to put it in."""
    cache = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):
        home = environ.get("HOME", "")
        if not os.path.isabs(home):
            import pwd

            try:
                home = pwd.getpwuid(os.getuid()).pw_dir
            except KeyError:  # a uid without a passwd entry (containers)
                return None
        if not os.path.isabs(home):
            return None
        cache = os.path.join(home, ".cache")
    return os.path.join(cache, USER_FILE)


def read_paths(environ: Mapping[str, str]) -> List[str]:
    """Where readers look, in order (the first that exists is the record)."""
    given = advice_path(environ)
    if given is not None:
        return [given]
    mine = user_path(environ)
    return [p for p in (mine, SYSTEM_PATH) if p is not None]


def save_path(environ: Mapping[str, str]) -> str:
    """Where the writer writes: ``PYNUMABIND_ADVICE``, else system-wide as root, else per-user."""
    given = advice_path(environ)
    if given is not None:
        return given
    if os.geteuid() == 0:
        return SYSTEM_PATH
    mine = user_path(environ)
    if mine is None:
        raise AdviceRecordError(
            f"this account has no home directory for the per-user advice record: set "
            f"{ADVICE_VARIABLE}=FILE, or run as root to write {SYSTEM_PATH}"
        )
    return mine


def _found(environ: Mapping[str, str]) -> Tuple[Optional[str], List[str]]:
    """(the record's path or None, every path looked at)."""
    paths = read_paths(environ)
    for path in paths:
        if os.path.lexists(path):
            return path, paths
    return None, paths


# ---------------------------------------------------------------- machine


def this_machine(sysfs_root: str = SYSFS_ROOT) -> Machine:
    """This machine's fingerprint, read through discovery (sysfs only, every GPU; no NVML).

    GPUs are sysfs's, named by PCI ids, so a record saved with NVML compares
    the same read without it; NUMA node CPUs and SLIT distances come from the
    same layout a bind reads (kept between calls), memory sizes from each
    node's ``meminfo``.
    """
    from .._os import cpuinfo as _cpuinfo
    from .._os import meminfo as _meminfo
    from .._os import sysfs as _sysfs
    from ..discovery import detect_topology
    from ..model import Detail

    topology = detect_topology(
        environ={},
        use_nvml=False,
        sysfs_root=sysfs_root,
        detail=Detail.NODES,
        reuse=True,
        visible_only=False,
    )
    return machine_of(
        topology,
        cpu_model=_cpuinfo.cpu_model(),
        kernel=_sysfs.kernel_release(),
        memory_bytes=_meminfo.node_memory_sizes(sysfs_root, sorted(topology.nodes)),
    )


# ------------------------------------------------------------------- save


def _cannot_write(target: str, exc: OSError) -> AdviceRecordError:
    where = f" ({exc.filename})" if exc.filename and exc.filename != target else ""
    return AdviceRecordError(
        f"cannot write the advice record {target}: {exc.strerror or exc}{where}; name a file "
        f"you may write with {ADVICE_VARIABLE}=FILE or advise --save FILE"
    )


def refuse_foreign(path: str) -> None:
    """An AdviceRecordError when something that is not an advice record is at ``path``."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _cannot_write(path, exc) from exc
    if not stat.S_ISREG(info.st_mode):
        raise AdviceRecordError(
            f"refusing to write the advice record {path}: it is not a regular file"
        )
    try:
        text = _read_text(path)
        document = json.loads(text)
    except (AdviceRecordError, ValueError, RecursionError):
        document = None
    if not is_record(document):
        raise AdviceRecordError(
            f'refusing to overwrite {path}: it is not an advice record (no "record": '
            '"pynumabind advice" key); remove it or choose another path'
        )


def save_record(
    advice: _rule.Advice,
    path: Optional[str] = None,
    *,
    environ: Optional[Mapping[str, str]] = None,
    machine: Optional[Machine] = None,
) -> str:
    """Write ``advice`` and ``machine`` (default: this one) atomically; the absolute path.

    See the module docstring for the path rule and what is refused.
    """
    env = os.environ if environ is None else environ
    target = save_path(env) if path is None else path
    if not target or "\0" in target:
        raise AdviceRecordError(f"invalid advice record path {target!r}")
    target = os.path.abspath(target)
    refuse_foreign(target)
    machine = this_machine() if machine is None else machine
    saved = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = json.dumps(record_dict(advice, machine, saved, __version__), indent=2) + "\n"
    directory = os.path.dirname(target)
    temporary: Optional[str] = None
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".advice-", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
            os.fchmod(out.fileno(), 0o644)
        os.replace(temporary, target)
        temporary = None
    except OSError as exc:
        raise _cannot_write(target, exc) from exc
    finally:
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass
    return target


# ------------------------------------------------------------------- load


def _read_text(path: str) -> str:
    """The record file's text: a regular file only, bounded, UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise AdviceRecordError(f"cannot read the advice record {path}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise AdviceRecordError(f"the advice record {path} is not a regular file")
            data = handle.read(MAX_RECORD_BYTES + 1)
    except OSError as exc:
        raise AdviceRecordError(f"cannot read the advice record {path}: {exc.strerror}") from exc
    if len(data) > MAX_RECORD_BYTES:
        raise AdviceRecordError(f"the advice record {path} is larger than {MAX_RECORD_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AdviceRecordError(
            f"the advice record {path} is not UTF-8 text (byte {exc.start})"
        ) from exc


def load_record(
    path: Optional[str] = None, *, environ: Optional[Mapping[str, str]] = None
) -> Record:
    """The record at ``path`` (default: the path rule's); its advice is an :class:`Advice`.

    Missing, unreadable or not a record: an :class:`AdviceRecordError` naming
    the file (or, with no file, every path looked at).
    """
    env = os.environ if environ is None else environ
    if path is None:
        found, looked = _found(env)
        if found is None:
            raise AdviceRecordError(
                f"no advice record ({' or '.join(looked)}): run `{SAVE_COMMAND}` on this machine"
            )
        path = found
    record = parse_record(_read_text(path), path)
    values = {f.name: getattr(record.advice, f.name) for f in fields(record.advice)}
    return replace(record, advice=Advice(**values))


def load_advice(
    path: Optional[str] = None,
    *,
    check_machine: bool = True,
    environ: Optional[Mapping[str, str]] = None,
) -> Advice:
    """The saved :class:`Advice` (public as ``pynumabind.load_advice``).

    ``advice.recommendation.options()`` is then the
    :class:`~pynumabind.Options` a bind takes.

    Args:
        path: The record's file (default: the path rule's: ``PYNUMABIND_ADVICE``,
            else the per-user file, else the system-wide one, the first that
            exists).
        check_machine: Refuse a record of another machine, or of this one
            before it changed (pass ``False`` to read another machine's).
        environ: Where ``PYNUMABIND_ADVICE``, ``XDG_CACHE_HOME`` and ``HOME``
            come from (default ``os.environ``).

    Returns:
        The :class:`Advice` the record holds (it has :meth:`Advice.save`).

    Raises:
        AdviceRecordError: no record, one that cannot be read or is not an
            advice record (naming the file and the key), or, with
            ``check_machine``, a stale one (listing what differs).
    """
    record = load_record(path, environ=environ)
    if check_machine:
        differences = staleness(record.machine, this_machine())
        if differences:
            raise AdviceRecordError(
                f"the advice record {record.path} is stale: {'; '.join(differences)}; "
                f"run `{SAVE_COMMAND}` again"
            )
    assert isinstance(record.advice, Advice)
    return record.advice


# --------------------------------------------------------- mode advised


@dataclass(frozen=True)
class Advised:
    """Mode ``advised`` resolved into plain values for the planner (see the module docstring).

    ``options``: the record's mode and policy (or the default mode's);
    ``topology``: GPUs moved to their measured node; ``reasons``: to put
    first in every plan; ``not_bound``: the record says do not bind (why,
    quoting it); ``fallback``: no usable record (the warning logged).
    """

    options: Options
    topology: Topology
    reasons: Tuple[str, ...] = ()
    not_bound: Optional[str] = None
    fallback: Optional[str] = None

    def finish(self, plan: Plan) -> Plan:
        """``plan`` with this resolution's reasons first (a fallback is a warning too)."""
        warnings = plan.warnings if self.fallback is None else (self.fallback, *plan.warnings)
        return replace(plan, reasons=(*self.reasons, *plan.reasons), warnings=warnings)


def _usable(
    env: Mapping[str, str], machine: Optional[Machine]
) -> Tuple[Optional[Record], Optional[str]]:
    """The record, or why there is none to follow (no file, stale, unreadable)."""
    try:
        path, looked = _found(env)
        if path is None:
            return None, f"no advice record ({' or '.join(looked)})"
        record = load_record(path, environ=env)
        differences = staleness(record.machine, this_machine() if machine is None else machine)
    except PynumabindError as exc:  # AdviceRecordError, or the machine could not be read
        return None, str(exc)
    if differences:
        return None, (
            f"the advice record {path} (saved {record.saved}) is stale, this machine "
            f"changed or is another one: {'; '.join(differences)}"
        )
    return record, None


def _gpu_for(record: Record, gpu: Gpu) -> Optional[GpuAdvice]:
    """The record's advice for ``gpu``, matched by PCI bus id."""
    from .._os.pci import normalize_bus_id

    for measured in record.advice.copies:
        if measured.pci_bus_id is None:
            continue
        try:
            same = normalize_bus_id(measured.pci_bus_id) == gpu.pci_bus_id
        except PynumabindError:
            continue
        if same:
            return record.advice.recommendation.gpu(measured.index)
    return None


def _reported_cpu_nodes(topology: Topology, gpu: Gpu) -> frozenset[int]:
    """The CPU node(s) the GPU's own report places it on: its node, else its CPU affinity's.

    A GPU on a CPU-less node (its own memory, Grace/GB200) is on the nodes of
    its CPU affinity: copies measured fastest from there are no move.
    """
    node = topology.nodes.get(gpu.numa_node) if gpu.numa_node is not None else None
    if node is not None and node.cpus:
        return frozenset({node.id})
    return frozenset(n for n in (topology.node_of_cpu(c) for c in gpu.local_cpus) if n is not None)


def _moved(record: Record, topology: Topology) -> Tuple[Topology, List[str]]:
    """``topology`` with each GPU whose copies were fastest from another node on that node."""
    rec = record.advice.recommendation
    gpus = list(topology.gpus)
    reasons: List[str] = []
    for position, gpu in enumerate(gpus):
        advice = _gpu_for(record, gpu)
        if advice is None or not advice.bind or advice.node is None:
            continue
        if advice.node not in topology.nodes or not topology.nodes[advice.node].cpus:
            continue
        if advice.node in _reported_cpu_nodes(topology, gpu):
            continue
        gpus[position] = replace(gpu, numa_node=advice.node, source="advice record")
        reasons.append(
            f"mode advised: GPU {gpu.index} ({gpu.pci_bus_id}): {rec.moved_text(advice)}; "
            f"bound to node {advice.node}"
        )
    return topology.replace(gpus=tuple(gpus)), reasons


def _warn_once(text: str) -> None:
    if text in _WARNED:
        return
    _WARNED.add(text)
    log.warning("pynumabind: %s", text)


def resolve_advised(
    options: Options,
    topology: Topology,
    environ: Optional[Mapping[str, str]] = None,
    *,
    machine: Optional[Machine] = None,
) -> Advised:
    """Mode ``advised`` as plain values; any other mode comes back unchanged.

    Reads the record and this machine's fingerprint (``machine``, default
    :func:`this_machine`); measures nothing.
    """
    if options.cpu_mode is not CpuMode.ADVISED:
        return Advised(options, topology)
    if options.policy is not None:
        given = options.from_environment("policy") or options.spelled("policy")
        raise ConfigError(
            f"mode 'advised' takes the memory policy from the advice record; do not also "
            f"give one ({given})"
        )
    env = os.environ if environ is None else environ
    record, problem = _usable(env, machine)
    if record is None:
        text = (
            f"mode advised: {problem}; run `{SAVE_COMMAND}` on this machine (as root for "
            f"every account: {SYSTEM_PATH}); until then, the default mode's plan (node)"
        )
        _warn_once(text)
        return Advised(replace(options, mode=None), topology, (text,), fallback=text)
    rec = record.advice.recommendation
    if not rec.bind:
        why = f"mode advised: not bound, on purpose: {record.quoted()}"
        # Leave everything alone: a cpus override would contradict mode none.
        unbound = replace(options, mode=CpuMode.NONE, policy=MemoryPolicy.NONE, cpus=None)
        return Advised(unbound, topology, (why,), not_bound=why)
    moved, reasons = _moved(record, topology)
    first = f"mode advised: {record.quoted()}: mode {rec.mode}, policy {rec.policy}"
    chosen = replace(options, mode=CpuMode(rec.mode), policy=MemoryPolicy(rec.policy))
    return Advised(chosen, moved, (first, *reasons))
