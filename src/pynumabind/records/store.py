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

* **where** the record lives: the path rule (:mod:`pynumabind.records._paths`:
  :func:`read_paths`, :func:`save_path`);
* **reading and writing** its file (:mod:`pynumabind.records._file`: bounded
  reads, the atomic save, never over a file that is not a record) and its
  JSON (:mod:`pynumabind.records._json`: every key checked);
* **whether it applies**: this machine's fingerprint
  (:func:`this_machine`) against the record's
  (:mod:`pynumabind.records._machine` lists what makes a record stale);
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
  default mode's plan.
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
record decides both.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from functools import partial
from typing import List, Mapping, Optional, Tuple

from ..errors import AdviceRecordError, ConfigError, PynumabindError
from ..model import CpuMode, Gpu, MemoryPolicy, Plan, Topology
from ..options import Options
from ._file import read_text, refuse_foreign, save_record
from ._host import this_machine
from ._machine import Machine, MachineGpu, MachineNode, staleness
from ._paths import ADVICE_VARIABLE, SYSTEM_PATH, advice_path, find, read_paths, save_path
from ._validate import unfollowable
from .advice import Advice, Record, parse_record  # Advice: pynumabind.Advice
from .values import GpuAdvice

__all__ = [
    "load_advice",
]

log = logging.getLogger(__name__)

SAVE_COMMAND = "pynumabind advise --save"

_WARNED: set[str] = set()  # fallback warnings already logged in this process


# ------------------------------------------------------------------- load


def load_record(
    path: Optional[str] = None, *, environ: Optional[Mapping[str, str]] = None
) -> Record:
    """The record at ``path`` (default: the path rule's): its advice, machine, when saved.

    Missing, unreadable or not a record: an :class:`~pynumabind.AdviceRecordError` naming
    the file (or, with no file, every path looked at).
    """
    env = os.environ if environ is None else environ
    if path is None:
        found, looked = find(env)
        if found is None:
            raise AdviceRecordError(
                f"no advice record ({' or '.join(looked)}): run `{SAVE_COMMAND}` on this machine"
            )
        path = found
    return parse_record(read_text(path), path)


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
        path: The record's file (default: the path rule's: ``PYNUMABIND_ADVICE``,
            else the per-user file, else the system-wide one, the first that
            exists).
        check_machine: Refuse a record of another machine, or of this one
            before it changed (pass ``False`` to read another machine's).
        environ: Where ``PYNUMABIND_ADVICE``, ``XDG_CACHE_HOME`` and ``HOME``
            come from (default ``os.environ``).

    Returns:
        The :class:`~pynumabind.Advice` the record holds.

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
        path, looked = find(env)
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
    if record is not None:  # every node it moves a GPU to, checked against the machine planned
        problem = unfollowable(record, topology, partial(_gpu_for, record), _reported_cpu_nodes)
        if problem is not None:
            text = f"mode advised: {problem}; the default mode's plan (node) instead"
            _warn_once(text)
            return Advised(replace(options, mode=None), topology, (text,), fallback=text)
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
