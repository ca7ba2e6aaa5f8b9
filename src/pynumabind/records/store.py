"""The advice record store: reading the record, and mode ``advised``.

``pynumabind advise --save`` (:meth:`pynumabind.Advice.save`) measures once
per machine and writes a record; mode ``advised`` reads it in every worker
and binds as it says (:func:`resolve_advised`).  The store reads files and
the machine but measures nothing, so the binding imports it: a worker never
measures (eight workers measuring at once disturb each other, and delay
start-up).  Its public names are re-exported by
:mod:`pynumabind.advisor.record`, where users import them, and
``pynumabind.load_advice``.

The pieces, each a function of its own:

* **where** the records live: the path rule (:mod:`pynumabind.records._paths`:
  :func:`read_paths`, :func:`save_path`; a place is one record file or a
  directory of records, one per machine type, :func:`names_directory`);
* **reading and writing** a record's file (:mod:`pynumabind.records._file`:
  bounded reads, :func:`prepare_save` before measuring, the atomic save,
  never over a file that is not a record, readable by every account) and
  its JSON (:mod:`pynumabind.records._json`: every key checked);
* **which record applies**: this machine's fingerprint
  (:func:`this_machine`) against the records'
  (:mod:`pynumabind.records._machine` lists what makes a record stale and
  what a machine type is; :mod:`pynumabind.records._directory` chooses the
  record a machine follows in a directory, :func:`list_records` shows them
  all);
* **following it**: :func:`load_record`, :func:`load_advice`, and
  :func:`resolve_advised`, here.

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
  process naming the file, what differs (or what is wrong: the field, by its
  JSON path) and the command to run (``pynumabind advise --save``), then the
  default mode's plan.  In a directory, "none" means no record of this
  machine's type: the warning names the directory, how many records it holds
  and the closest one's differences; records of other machines are otherwise
  ignored, silently.
* **one that cannot be followed here**: a GPU moved to a node that has no
  CPUs on the machine planned, or none this process may use (its cpuset).
  Every node the record moves a GPU to is checked before anything is
  followed (:func:`pynumabind.records._validate.unfollowable`); a problem is
  one WARNING naming the record, the field and the node, then the default
  mode's plan, and no reason says the record is followed.

A record is untrusted input: what it must hold to be read at all, and the
bounds that keep an absurd one cheap to refuse, are
:mod:`pynumabind.records._validate`'s.

A memory policy given together with mode ``advised`` is a ConfigError: the
record decides both.  So are interleave weights (``weights``): the record
decides them with the policy.  A record whose policy is
``weighted-interleave`` (``advise`` measured weighted interleave beat local
memory: :mod:`pynumabind.advisor.rule`, rule 3) fills ``Options.weights``
with its measured weights beside the policy, in :func:`resolve_advised`, and
the planner takes them as given ones; every node of them is checked against
the machine planned first (memory there, allowed to this process), as a
GPU's node is, and a problem is the same one warning and the default plan.

Planning for another machine
----------------------------
``pynumabind plan --topology OTHER.json --mode advised`` (or
``--sysfs-root``) plans for the snapshot's machine, so
:func:`resolve_advised` is given that machine's fingerprint
(:func:`snapshot_machine`) and ``machine_name`` (what the messages call it):
it follows the record of that machine, found the same way, or warns once
and plans the default mode -- never this host's record.  A snapshot holds no
CPU model and no kernel, so those are not compared (the plan's reasons say
so); when several records match, the newest saved is followed.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from functools import partial
from typing import List, Mapping, Optional, Tuple

from .._weights import format_weights
from ..errors import AdviceRecordError, ConfigError, PynumabindError
from ..model import CpuMode, Gpu, MemoryPolicy, Plan, Topology
from ..options import Options
from ._directory import (
    MAX_DIRECTORY_RECORDS,
    THIS_MACHINE,
    Listing,
    RecordEntry,
    find_in_directory,
    list_directory,
    read_entry,
)
from ._file import (
    SaveTarget,
    others_cannot_read,
    place_exists,
    prepare_save,
    read_text,
    refuse_foreign,
    save_record,
)
from ._host import this_machine
from ._machine import (
    Machine,
    MachineGpu,
    MachineNode,
    record_name,
    snapshot_machine,
    staleness,
)
from ._paths import (
    ADVICE_VARIABLE,
    SYSTEM_PATH,
    advice_path,
    names_directory,
    read_paths,
    save_path,
)
from ._validate import unfollowable
from .advice import Advice, Record, parse_record  # Advice: pynumabind.Advice
from .values import GpuAdvice

__all__ = [
    "ADVICE_VARIABLE",
    "MAX_DIRECTORY_RECORDS",
    "SAVE_COMMAND",
    "SYSTEM_PATH",
    "Advised",
    "Listing",
    "Machine",
    "MachineGpu",
    "MachineNode",
    "Record",
    "RecordEntry",
    "SaveTarget",
    "advice_path",
    "list_records",
    "load_advice",
    "load_record",
    "names_directory",
    "others_cannot_read",
    "prepare_save",
    "read_paths",
    "record_name",
    "refuse_foreign",
    "resolve_advised",
    "save_path",
    "save_record",
    "snapshot_machine",
    "staleness",
    "this_machine",
]

log = logging.getLogger(__name__)

SAVE_COMMAND = "pynumabind advise --save"

_WARNED: set[str] = set()  # fallback warnings already logged in this process


# ------------------------------------------------------------------- load


def _look(place: str, machine: Machine) -> Optional[Listing]:
    """What ``place`` holds for ``machine``: None when nothing is there (a missing place).

    A directory: the record ``machine`` follows in it (the fast path first).
    A file: the record in it, compared.  An unreadable directory is an
    AdviceRecordError.
    """
    if not place_exists(place):
        return None
    if names_directory(place):
        return find_in_directory(place, machine)
    entry = read_entry(place, machine)
    return Listing(place, False, (entry,), entry if entry.matches else None)


def _search(
    places: List[str], machine: Machine, machine_name: str = THIS_MACHINE
) -> Tuple[Optional[Record], str]:
    """The first record along ``places`` that ``machine`` follows, or why there is none."""
    problems: List[str] = []
    for place in places:
        try:
            listing = _look(place, machine)
        except AdviceRecordError as exc:
            problems.append(str(exc))
            continue
        if listing is None:
            continue
        if listing.followed is not None and listing.followed.record is not None:
            return listing.followed.record, ""
        problems.append(listing.problem(machine_name))
    if not problems:
        return None, f"no advice record ({' or '.join(places)})"
    return None, "; ".join(problems)


def _full_listing(place: str, machine: Machine) -> Listing:
    """Every record of ``place``; a file there that is not a record is an AdviceRecordError."""
    if names_directory(place):
        return list_directory(place, machine)
    entry = read_entry(place, machine)
    if entry.record is None:
        raise AdviceRecordError(entry.problem or f"cannot read {place}")
    return Listing(place, False, (entry,), entry if entry.matches else None)


def list_records(
    path: Optional[str] = None,
    *,
    environ: Optional[Mapping[str, str]] = None,
    machine: Optional[Machine] = None,
) -> List[Listing]:
    """What ``path`` (default: the path rule's places) holds, compared with ``machine``.

    One :class:`~pynumabind.records._directory.Listing` per place that
    exists, every record file read (bounded); the record ``machine``
    (default: this one) follows is the ``followed`` of one listing at most,
    the first along the places, as a worker finds it.  This is what
    ``pynumabind records`` prints.

    Raises:
        AdviceRecordError: ``path`` is missing, cannot be listed, or is a
            file that cannot be read as an advice record; with no ``path``,
            none of the default places exists.
    """
    env = os.environ if environ is None else environ
    if path is not None and (not path or "\0" in path):
        raise AdviceRecordError(f"invalid advice record path {path!r}")
    places = read_paths(env) if path is None else [path]
    machine = this_machine() if machine is None else machine
    out: List[Listing] = []
    for place in places:
        if not place_exists(place):
            if len(places) == 1:
                raise AdviceRecordError(f"{place} does not exist; run `{SAVE_COMMAND}`")
            continue
        listing = _full_listing(place, machine)
        if any(earlier.followed is not None for earlier in out):
            listing = replace(listing, followed=None)  # a worker stops at the first
        out.append(listing)
    if not out:
        raise AdviceRecordError(
            f"no advice records: none of {', '.join(places)} exists; run `{SAVE_COMMAND}`"
        )
    return out


def load_record(
    path: Optional[str] = None,
    *,
    environ: Optional[Mapping[str, str]] = None,
    machine: Optional[Machine] = None,
) -> Record:
    """The record at ``path`` (default: the path rule's): its advice, machine, when saved.

    A record file is read as it is (whatever machine it was measured on); in
    a directory, and at the default places, the record is the one
    ``machine`` (default: this machine) follows.  Missing, unreadable, not a
    record, or no record of this machine in a directory: an
    :class:`~pynumabind.AdviceRecordError` naming the file or the directory
    (or, with nothing there, every place looked at).
    """
    env = os.environ if environ is None else environ
    places = read_paths(env) if path is None else [path]
    if len(places) == 1 and not names_directory(places[0]):
        if not os.path.lexists(places[0]):
            raise AdviceRecordError(
                f"no advice record ({places[0]}): run `{SAVE_COMMAND}` on this machine"
            )
        return parse_record(read_text(places[0]), places[0])
    record, problem = _search(places, this_machine() if machine is None else machine)
    if record is None:
        raise AdviceRecordError(f"{problem}: run `{SAVE_COMMAND}` on this machine")
    return record


def load_advice(
    path: Optional[str] = None,
    *,
    check_machine: bool = True,
    environ: Optional[Mapping[str, str]] = None,
) -> Advice:
    """The saved :class:`~pynumabind.Advice` (public as ``pynumabind.load_advice``).

    ``advice.recommendation.options()`` is then the
    :class:`~pynumabind.Options` a bind takes.

    Args:
        path: A record's file, or a directory of records (default: the path
            rule's: ``PYNUMABIND_ADVICE``, else the per-user directory, else
            the system-wide one).  In a directory, the record of this
            machine's type.
        check_machine: Refuse a record of another machine, or of this one
            before it changed (pass ``False``, with a record's file, to read
            another machine's).
        environ: Where ``PYNUMABIND_ADVICE``, ``XDG_CACHE_HOME`` and ``HOME``
            come from (default ``os.environ``).

    Returns:
        The :class:`~pynumabind.Advice` the record holds.

    Raises:
        AdviceRecordError: no record, one that cannot be read or is not an
            advice record (naming the file and the key), or, with
            ``check_machine``, a stale one (listing what differs);
            ``check_machine=False`` with a directory (name the file).
    """
    env = os.environ if environ is None else environ
    places = read_paths(env) if path is None else [path]
    single_file = len(places) == 1 and not names_directory(places[0])
    if not check_machine and not single_file:
        raise AdviceRecordError(
            f"{' and '.join(places)} hold one record per machine type: name the record's file "
            "to read another machine's (`pynumabind records` lists them)"
        )
    record = load_record(path, environ=env)
    if check_machine and single_file:
        differences = staleness(record.machine, this_machine())
        if differences:
            raise AdviceRecordError(
                f"the advice record {record.path} is stale: {'; '.join(differences)}; "
                f"run `{SAVE_COMMAND}` again"
            )
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
    env: Mapping[str, str], machine: Optional[Machine], machine_name: str
) -> Tuple[Optional[Record], Optional[str]]:
    """The record, or why there is none to follow (none, stale, unreadable)."""
    try:
        places = read_paths(env)
        record, problem = _search(
            places, this_machine() if machine is None else machine, machine_name
        )
    except PynumabindError as exc:  # AdviceRecordError, or the machine could not be read
        return None, str(exc)
    return record, (problem if record is None else None)


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


def _refuse_what_the_record_chooses(options: Options) -> None:
    """What mode advised takes from the record (the policy, its weights): given too, an error."""
    if options.policy is not None:
        given = options.from_environment("policy") or options.spelled("policy")
        raise ConfigError(
            f"mode 'advised' takes the memory policy from the advice record; do not also "
            f"give one ({given})"
        )
    if options.weights is not None:
        given = options.from_environment("weights") or options.spelled("weights")
        raise ConfigError(
            f"mode 'advised' takes the memory policy and its interleave weights from the advice "
            f"record; do not also give weights ({given})"
        )
    if options.tiers == "all":
        given = options.from_environment("tiers") or options.spelled("tiers")
        raise ConfigError(
            f"mode 'advised' takes the memory policy from the advice record, and tiers 'all' "
            f"would choose it too (weighted interleave over the tiers): give one of the two "
            f"({given})"
        )


def resolve_advised(
    options: Options,
    topology: Topology,
    environ: Optional[Mapping[str, str]] = None,
    *,
    machine: Optional[Machine] = None,
    machine_name: Optional[str] = None,
) -> Advised:
    """Mode ``advised`` as plain values; any other mode comes back unchanged.

    Reads the record and the fingerprint of the machine planned for
    (``machine``, default :func:`this_machine`); measures nothing.  Planning
    for another machine, pass its fingerprint (:func:`snapshot_machine`) and
    ``machine_name``, what the messages call it ("the machine of snapshot
    x.json"): see the module docstring.
    """
    if options.cpu_mode is not CpuMode.ADVISED:
        return Advised(options, topology)
    _refuse_what_the_record_chooses(options)
    env = os.environ if environ is None else environ
    name = THIS_MACHINE if machine_name is None else machine_name
    record, problem = _usable(env, machine, name)
    if record is not None:  # every node it moves a GPU to, checked against the machine planned
        problem = unfollowable(record, topology, partial(_gpu_for, record), _reported_cpu_nodes)
        if problem is not None:
            text = f"mode advised: {problem}; the default mode's plan (node) instead"
            _warn_once(text)
            return Advised(replace(options, mode=None), topology, (text,), fallback=text)
    if record is None:
        where = (
            f"on this machine (as root for every account: {SYSTEM_PATH})"
            if machine_name is None
            else f"on {name}"
        )
        text = (
            f"mode advised: {problem}; run `{SAVE_COMMAND}` {where}; until then, the default "
            "mode's plan (node)"
        )
        _warn_once(text)
        return Advised(replace(options, mode=None), topology, (text,), fallback=text)
    rec = record.advice.recommendation
    matched = (
        ""
        if machine_name is None
        else (
            f" (the record of {name}, matched on its nodes, memory, distances and GPUs; a "
            "snapshot holds no CPU model or kernel to compare)"
        )
    )
    if not rec.bind:
        why = f"mode advised: not bound, on purpose: {record.quoted()}{matched}"
        # Leave everything alone: a cpus override would contradict mode none.
        unbound = replace(options, mode=CpuMode.NONE, policy=MemoryPolicy.NONE, cpus=None)
        return Advised(unbound, topology, (why,), not_bound=why)
    moved, reasons = _moved(record, topology)
    chosen, first = _followed(options, record, matched)
    return Advised(chosen, moved, (first, *reasons))


def _followed(options: Options, record: Record, matched: str) -> Tuple[Options, str]:
    """The record's mode, policy and weights in ``options``, and the reason that says so.

    The one seam for advised weights: a record recommending weighted-interleave
    brings them (checked against the machine planned before); the planner takes
    them as given ones.
    """
    rec = record.advice.recommendation
    weights = None if rec.weights is None else dict(rec.weights)
    shown = "" if weights is None else f", weights {format_weights(weights)} (measured)"
    first = f"mode advised: {record.quoted()}: mode {rec.mode}, policy {rec.policy}{shown}{matched}"
    chosen = replace(
        options, mode=CpuMode(rec.mode), policy=MemoryPolicy(rec.policy), weights=weights
    )
    return chosen, first
