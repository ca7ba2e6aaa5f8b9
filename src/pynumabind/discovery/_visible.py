"""Which GPUs this process sees, and in what order (pure: values in, values out).

The Nth GPU a CUDA/HIP process uses is not the driver's GPU N: the runtime
first orders devices (``CUDA_DEVICE_ORDER``), then keeps and reorders them
as ``CUDA_VISIBLE_DEVICES`` says.  Local rank r uses process ordinal r, so
getting this mapping right is what makes "bind rank r next to its GPU"
correct.  The result is a :class:`Topology` whose ``gpus`` are the visible
devices in process order (``index`` = process ordinal, ``physical_index`` =
driver index).

CUDA rules implemented (NVIDIA, and any non-AMD accelerator):

* unset ``CUDA_VISIBLE_DEVICES``: every device; empty string: none;
* entries are indices into the ordered device list, GPU UUIDs
  (``GPU-8d1c...``; any unique prefix that includes ``GPU-``), legacy MIG
  names ``MIG-GPU-<uuid>/<gi>/<ci>`` (resolved here: the parent is in the
  name) and ``MIG-<uuid>`` MIG UUIDs (resolved only with NVML's help, passed
  in as ``mig_parents``; without it they raise :class:`ConfigError`, since
  guessing the GPU would bind to the wrong node; so do UUIDs and legacy MIG
  names when no device has a known UUID, i.e. without NVML or KFD);
* the first entry that names no device (out of range, unknown UUID,
  ambiguous prefix, ``-1``, garbage) ends the list, as CUDA does; a device
  named twice is a :class:`ConfigError` (see "A device named twice" below);
* ``CUDA_DEVICE_ORDER``: ``PCI_BUS_ID`` sorts by PCI address;
  ``FASTEST_FIRST`` (the default) makes CUDA rank devices by compute
  capability and SM count, which needs the CUDA runtime.  pynumabind
  approximates it by driver (NVML) order, which is exact when all GPUs are
  one model, and leaves a note when models differ.  Anything else is a
  :class:`ConfigError`.

AMD rules: ``ROCR_VISIBLE_DEVICES`` (indices into KFD order, or UUIDs)
selects first; ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``, which HIP
honours when HIP's own variable is unset) then indexes into what ROCr left.
An entry that names no device ends the list, as in CUDA (ROCr and HIP both
stop there).

Index entries count the GPUs this process can open, in the runtime's order,
as CUDA and ROCr do.  Under a device cgroup (Slurm's ``ConstrainDevices``)
the driver lists GPUs the process may not open (NVML: NO_PERMISSION); CUDA
skips them, so on a DGX H100 whose job owns GPUs 4-7, ``CUDA_VISIBLE_DEVICES=0``
is GPU 4.  Discovery drops such GPUs and records their driver indices in
``Topology.denied_gpus``; when that is not empty, an index entry N is the
Nth GPU of the ordered list.  When it is empty, an index entry N names the
GPU whose ``physical_index`` is N -- the same GPU whenever the list holds
every GPU of the machine, and still the right one on a list that lacks some
for another reason (an old schema-1 snapshot taken under
``CUDA_VISIBLE_DEVICES=2,3``, physical indices 2 and 3, still gives GPUs 2
and 3 for ``2,3``).  ``PCI_BUS_ID`` order counts positions, so on a list
known to be filtered (physical-index gaps that no denial explains) it is a
:class:`TopologyError`.

An index entry that names no GPU while the machine has GPUs is a
:class:`ConfigError` naming the entry and the GPUs there are (it used to
end the list, CUDA's rule, and a job whose every entry missed was planned
as on a GPU-less machine, on the wrong socket).  Entries that are not
indices (``-1``, ``3x``, an unknown UUID) keep CUDA's rule below.

Intel GPUs (Level Zero): ``ZE_AFFINITY_MASK`` selects first, then
``ONEAPI_DEVICE_SELECTOR``'s ``level_zero:`` (or ``*:``) terms index into
what it left.  Entries are card indices in PCI address order (assumption:
Level Zero's default order on Intel data-center GPUs, and
``ZE_ENABLE_PCI_ID_DEVICE_ORDER=1`` makes it certain), or ``card.tile``:
one device, the tile's card (a tile shares its card's NUMA node).  An index
counts cards, as in Level Zero's ``COMPOSITE`` device hierarchy
(assumption: under ``ZE_FLAT_DEVICE_HIERARCHY=FLAT``, the driver's default
on Data Center GPU Max, an index counts tiles and the driver ignores
``card.tile`` entries, which pynumabind cannot follow: it does not know how
many tiles a card has).  ``ZE_AFFINITY_MASK`` is a mask, not a list: the
devices it keeps come in the driver's order, whatever the order of its
entries (the Level Zero specification says so, and the driver keeps a bit
per card and tile), so ``5,0`` is cards 0 and 5, in that order.
``ONEAPI_DEVICE_SELECTOR`` keeps the order of its entries (assumption).  It
also takes ``*`` and ``gpu`` (every device) and ``card.*``; a discard term
(``!``) is a :class:`ConfigError`, and terms for other backends are left out
with a note.

A device named twice -- one rule for every variable: a device is never
listed twice, and an entry that names a device already listed does what the
runtime that reads the variable does with it (read in each runtime's source,
or where that is closed, in the closest public model of it):

* **CUDA** (``CUDA_VISIBLE_DEVICES`` read by CUDA): a :class:`ConfigError`
  naming both entries.  NVIDIA does not document it; PyTorch's device count,
  which models CUDA's parsing of the variable (``torch.cuda``'s
  ``_parse_visible_devices``: "Repeated ordinal results in empty set"),
  sees no GPU at all, so no rank could be placed.  The same GPU named by an
  index and by its UUID is a repeat too; two MIG instances of one GPU are
  two devices, one MIG name given twice is a repeat.
* **ROCr** (``ROCR_VISIBLE_DEVICES``): the repeat ends the list, with a note
  naming the entries left out (ROCr reads a repeated index as a
  terminator: ``RvdFilter::BuildUsrDeviceList``).
* **HIP** (``HIP_VISIBLE_DEVICES``, or ``CUDA_VISIBLE_DEVICES`` read by
  HIP): the repeat is skipped and the list goes on (ROCclr keeps a set of
  the indices it took: ``roc::Device::init``).
* **Level Zero** (``ZE_AFFINITY_MASK``, ``ONEAPI_DEVICE_SELECTOR``): the
  repeat is skipped and the list goes on, since the driver keeps one bit per
  card and tile.  A card named whole covers its tiles: ``0,0.1`` and
  ``0.1,0`` are one device, card 0; ``0.0,0.0,2.0`` is two, tiles 0.0 and
  2.0 (device 1 on card 2's node).  Two tiles of one card named apart stay
  two devices here, both on the card's node (``0.0,0.1``; the driver shows
  one device there, the card, with the two tiles as its sub-devices).

Applied once, never twice: a topology whose GPUs visibility has filtered
records the variables that did it (``Topology.visibility``).  Applying
visibility to it again is accepted only under the very same settings (it is
returned unchanged); any other setting is a :class:`TopologyError`, since the
GPUs it would need are not in the list.  ``pynumabind snapshot`` records the
whole machine, so its snapshots take any setting.

What was done with the variables is said in one line wherever a plan is
shown (:func:`visibility_note`): applied (the GPUs this process sees, by
physical index), or not applied because a recorded machine is planned as
recorded (the CLI's ``--topology`` for ``show`` and ``plan``, and
``--sysfs-root``): the variables describe this machine's devices, not
another's, so a recorded machine keeps all its GPUs, and
``PYNUMABIND_TOPOLOGY=FILE`` is the way to plan this process on it, with
them applied.

When the machine has GPUs and the variables hide every one of them (``-1``,
``3x``, an ambiguous UUID prefix, or empty: a CPU-only job), the topology
says so in one note (:meth:`Topology.hidden_gpus_warning`): discovery logs
it as a warning, plans carry it, and ``require_node`` turns it into a
PlanError.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .._record import replace
from .._text import counted, format_ids
from ..errors import ConfigError, TopologyError
from ..model import VISIBILITY_VARIABLES, Gpu, Topology

__all__ = [
    "CUDA_DEVICE_ORDERS",
    "apply_visibility",
    "cuda_device_order",
    "mig_uuids",
    "select_visible",
    "visibility_note",
]

CUDA_DEVICE_ORDERS = ("FASTEST_FIRST", "PCI_BUS_ID")

#: What each runtime does with an entry naming a device already listed (see
#: "A device named twice" in the module docstring): refuse the value, end the
#: list there, or skip the entry and go on.
REPEAT_REFUSED = "refused"
REPEAT_ENDS = "ends the list"
REPEAT_SKIPPED = "skipped"


def cuda_device_order(
    gpus: Sequence[Gpu], environ: Mapping[str, str]
) -> Tuple[List[Gpu], List[str]]:
    """``gpus`` in the order CUDA enumerates them before ``CUDA_VISIBLE_DEVICES``."""
    raw = environ.get("CUDA_DEVICE_ORDER")
    order = (raw or "").strip() or "FASTEST_FIRST"
    if order not in CUDA_DEVICE_ORDERS:
        raise ConfigError(
            f"CUDA_DEVICE_ORDER={raw!r} is not one of {', '.join(CUDA_DEVICE_ORDERS)}"
        )
    notes: List[str] = []
    if order == "PCI_BUS_ID":
        return sorted(gpus, key=lambda g: g.pci_bus_id), notes
    ordered = sorted(gpus, key=lambda g: (g.physical_index is None, g.physical_index or 0))
    models = sorted({g.model for g in gpus if g.model})
    if len(models) > 1:
        notes.append(
            f"GPU models differ ({'; '.join(models)}) and CUDA_DEVICE_ORDER is FASTEST_FIRST: "
            "CUDA ranks such GPUs by speed, pynumabind assumed driver order; "
            "set CUDA_DEVICE_ORDER=PCI_BUS_ID to make the order certain"
        )
    return ordered, notes


def mig_uuids(value: Optional[str]) -> List[str]:
    """The ``MIG-<uuid>`` entries of a visible-devices value (NVML must resolve them)."""
    if not value:
        return []
    return [
        t.strip()
        for t in value.split(",")
        if t.strip().upper().startswith("MIG-") and not t.strip().upper().startswith("MIG-GPU-")
    ]


def _match_uuid(token: str, devices: Sequence[Gpu]) -> Optional[int]:
    """Position of the one device whose UUID starts with ``token``."""
    wanted = token.lower()
    hits = [i for i, g in enumerate(devices) if g.uuid and g.uuid.lower().startswith(wanted)]
    exact = [i for i in hits if (devices[i].uuid or "").lower() == wanted]
    if exact:
        return exact[0]
    return hits[0] if len(hits) == 1 else None


def _resolve(
    token: str,
    devices: Sequence[Gpu],
    *,
    variable: str,
    mig_parents: Optional[Mapping[str, str]],
    unknown_uuids_fatal: bool,
    by_physical: bool = False,
) -> Tuple[Optional[int], str, bool]:
    """(position in ``devices`` or None, why not, is a MIG name) for one entry."""
    upper = token.upper()
    if _is_index(token):  # str.isdigit() also takes "²", "١"
        return _resolve_index(int(token), devices, by_physical)
    if (
        unknown_uuids_fatal
        and upper.startswith(("GPU-", "MIG-GPU-"))
        and not any(g.uuid for g in devices)
    ):
        raise ConfigError(
            f"{variable} entry {token!r} names a GPU by UUID, but no GPU UUID is "
            "known here (NVML or the KFD topology is not available), so which GPU "
            "it is cannot be told; use GPU indices"
        )
    if upper.startswith("MIG-"):
        return _resolve_mig(token, devices, variable=variable, mig_parents=mig_parents)
    if upper.startswith("GPU-"):
        where = _match_uuid(token, devices)
        prefix_of = [g for g in devices if g.uuid and g.uuid.lower().startswith(token.lower())]
        why = "is an ambiguous UUID prefix" if where is None and prefix_of else "matches no device"
        return where, why, False
    return None, "matches no device", False


def _resolve_index(
    number: int, devices: Sequence[Gpu], by_physical: bool
) -> Tuple[Optional[int], str, bool]:
    """:func:`_resolve` for an index: by physical index when known, else by position."""
    if by_physical and all(g.physical_index is not None for g in devices):
        for position, gpu in enumerate(devices):
            if gpu.physical_index == number:
                return position, "", False
        return None, f"names no GPU ({_existing(devices, by_physical=True)})", False
    if number < len(devices):
        return number, "", False
    return None, f"names no GPU ({_existing(devices, by_physical=False)})", False


def _existing(devices: Sequence[Gpu], *, by_physical: bool) -> str:
    """The GPUs an index entry may name, in words (for errors)."""
    if not devices:
        return "there is none"
    driver = frozenset(g.physical_index for g in devices if g.physical_index is not None)
    if by_physical:
        return f"the GPUs here are {format_ids(driver)}"
    shown = f"indices 0-{len(devices) - 1}" if len(devices) > 1 else "index 0"
    also = f", driver indices {format_ids(driver)}" if len(driver) == len(devices) else ""
    return f"this process can open {len(devices)}: {shown}{also}"


def _filtered(devices: Sequence[Gpu], denied: frozenset[int] = frozenset()) -> bool:
    """Whether ``devices`` lacks GPUs: physical index gaps that ``denied`` does not fill."""
    known = [g.physical_index for g in devices]
    if not all(i is not None for i in known):
        return False
    return set(known) | denied != set(range(len(known) + len(denied)))


def _resolve_mig(
    token: str,
    devices: Sequence[Gpu],
    *,
    variable: str,
    mig_parents: Optional[Mapping[str, str]],
) -> Tuple[Optional[int], str, bool]:
    """:func:`_resolve` for a MIG entry: ``MIG-GPU-<uuid>/<gi>/<ci>``, or a MIG UUID.

    The legacy form names its GPU; a MIG UUID's GPU only NVML knows.
    """
    if token.upper().startswith("MIG-GPU-"):
        parent = "GPU-" + token[len("MIG-GPU-") :].split("/", 1)[0]
        return _match_uuid(parent, devices), "matches no device", True
    if mig_parents is None:
        raise ConfigError(
            f"{variable} entry {token!r} is a MIG device UUID: only NVML can tell "
            "which GPU it belongs to, and NVML is not available; use the GPU "
            "index, the GPU UUID or the legacy MIG-GPU-<uuid>/<gi>/<ci> form"
        )
    parent_uuid = mig_parents.get(token)
    if parent_uuid is None:
        return None, "is not a MIG device NVML knows", True
    return _match_uuid(parent_uuid, devices), "matches no device", True


def select_visible(
    devices: Sequence[Gpu],
    value: Optional[str],
    *,
    variable: str,
    mig_parents: Optional[Mapping[str, str]] = None,
    unknown_uuids_fatal: bool = True,
    by_physical: bool = False,
    repeat: str = REPEAT_REFUSED,
    runtime: str = "CUDA",
) -> Tuple[List[Gpu], List[str]]:
    """Apply one visible-devices variable to ``devices`` (already in order).

    Returns the selected devices in process order, and notes explaining any
    entry that was dropped.  A UUID entry when no device has a known UUID is
    a :class:`ConfigError` unless ``unknown_uuids_fatal`` is false (HIP
    reading CUDA_VISIBLE_DEVICES that names NVIDIA GPUs); so is an index
    entry that names no device when there are devices (same exception).
    ``by_physical``: an index entry names the device with that
    ``physical_index`` (see the module docstring), not the one at that
    position.  ``repeat`` is what ``runtime``, the one reading the variable,
    does with an entry naming a device already listed (:data:`REPEAT_REFUSED`,
    :data:`REPEAT_ENDS` or :data:`REPEAT_SKIPPED`; "A device named twice" in
    the module docstring).  An empty value selects nothing and adds no note
    of its own: :meth:`Topology.hidden_gpus_warning` is the one note.
    """
    if value is None:
        return list(devices), []
    if not value.strip():
        return [], []
    chosen: List[Gpu] = []
    notes: List[str] = []
    listed: Dict[object, str] = {}  # a device's identity -> the entry that listed it
    tokens = value.split(",")
    for position, raw in enumerate(tokens):
        token = raw.strip()
        where, why, mig = _resolve(
            token,
            devices,
            variable=variable,
            mig_parents=mig_parents,
            unknown_uuids_fatal=unknown_uuids_fatal,
            by_physical=by_physical,
        )
        if where is None and devices and unknown_uuids_fatal and _is_index(token):
            raise ConfigError(f"{variable}={value!r}: entry {token!r} {why}")
        # Two MIG instances of one GPU are two devices: a MIG entry is the same
        # device only as the same name.
        identity = ("mig", token.lower()) if mig else where
        if where is not None and identity in listed:
            first = listed[identity]
            if repeat == REPEAT_REFUSED:
                raise ConfigError(_repeat_refused(variable, value, token, first, runtime))
            if repeat == REPEAT_SKIPPED:
                notes.append(
                    f"{variable}={value!r}: entry {token!r} names the device entry "
                    f"{first!r} listed already; {runtime} lists it once and goes on"
                )
                continue
            where, why = None, f"names the device entry {first!r} listed already"
        if where is None:
            dropped = ",".join(t.strip() for t in tokens[position:])
            notes.append(
                f"{variable}={value!r}: entry {token!r} {why}; like {runtime}, it and "
                f"every later entry are ignored ({dropped})"
            )
            break
        listed[identity] = token
        chosen.append(devices[where])
    return chosen, notes


def _repeat_refused(variable: str, value: str, token: str, first: str, runtime: str) -> str:
    """The error for a device named twice where the runtime shows no GPU for it (CUDA)."""
    again = f"entry {token!r} names the GPU entry {first!r} named already"
    return (
        f"{variable}={value!r}: {again}; {runtime} does not show one GPU twice (PyTorch, "
        "which models its parsing, counts no GPU at all for such a value), so no rank "
        "could be placed: list each GPU once"
    )


def _is_index(token: str) -> bool:
    return token.isascii() and token.isdigit()


def _renumber(gpus: Iterable[Gpu]) -> Tuple[Gpu, ...]:
    return tuple(replace(g, index=i) for i, g in enumerate(gpus))


def _settings(env: Mapping[str, str]) -> Tuple[Tuple[str, str], ...]:
    """The visible-device variables set in ``env``, as (name, value) pairs."""
    return tuple((n, env[n]) for n in VISIBILITY_VARIABLES if env.get(n) is not None)


def _shown(settings: Tuple[Tuple[str, str], ...]) -> str:
    return ", ".join(f"{n}={v!r}" for n, v in settings) or "none of them set"


def _already_applied(topology: Topology, settings: Tuple[Tuple[str, str], ...]) -> Topology:
    """``topology`` (visibility applied once already) when ``settings`` are the same."""
    assert topology.visibility is not None
    if settings == topology.visibility:
        return topology
    raise TopologyError(
        f"this topology lists only the GPUs visible under {_shown(topology.visibility)}, "
        f"renumbered; this process has {_shown(settings)}, which cannot be applied to that "
        "list without misplacing ranks: take the snapshot with 'pynumabind snapshot' "
        "(it records every GPU), or use the same settings"
    )


def _cuda_visible(
    cuda_side: Sequence[Gpu],
    env: Mapping[str, str],
    mig_parents: Optional[Mapping[str, str]],
    denied: frozenset[int],
) -> Tuple[List[Gpu], List[str]]:
    ordered, notes = cuda_device_order(cuda_side, env)
    value = env.get("CUDA_VISIBLE_DEVICES")
    pci_order = env.get("CUDA_DEVICE_ORDER", "").strip() == "PCI_BUS_ID"
    if pci_order and value is not None and _filtered(cuda_side, denied):
        raise TopologyError(
            f"CUDA_DEVICE_ORDER=PCI_BUS_ID counts positions among all GPUs, but this "
            f"topology lists only some (physical indices "
            f"{format_ids(frozenset(g.physical_index or 0 for g in cuda_side))}): take the "
            "snapshot with 'pynumabind snapshot', which records every GPU"
        )
    chosen, select_notes = select_visible(
        ordered,
        value,
        variable="CUDA_VISIBLE_DEVICES",
        mig_parents=mig_parents,
        by_physical=not (pci_order or denied),
    )
    return chosen, notes + select_notes


def _amd_visible(
    amd_side: Sequence[Gpu], env: Mapping[str, str], cuda_too: bool, denied: frozenset[int]
) -> Tuple[List[Gpu], List[str]]:
    ordered = sorted(amd_side, key=lambda g: (g.physical_index is None, g.physical_index or 0))
    rocr_value = env.get("ROCR_VISIBLE_DEVICES")
    rocr, rocr_notes = select_visible(
        ordered,
        rocr_value,
        variable="ROCR_VISIBLE_DEVICES",
        by_physical=not denied,
        repeat=REPEAT_ENDS,
        runtime="ROCr",
    )
    hip_variable = "HIP_VISIBLE_DEVICES"
    if env.get(hip_variable) is None and env.get("CUDA_VISIBLE_DEVICES") is not None:
        hip_variable = "CUDA_VISIBLE_DEVICES"
    hip, hip_notes = select_visible(
        rocr,
        env.get(hip_variable),
        variable=hip_variable,
        unknown_uuids_fatal=not (cuda_too and hip_variable == "CUDA_VISIBLE_DEVICES"),
        by_physical=rocr_value is None and not denied,  # HIP indexes into what ROCr left
        repeat=REPEAT_SKIPPED,
        runtime="HIP",
    )
    return hip, rocr_notes + hip_notes


def _level_zero_entry(
    entry: str, devices: Sequence[Gpu], variable: str, value: str, wildcards: bool
) -> Tuple[List[int], Optional[int]]:
    """Positions in ``devices`` one Level Zero entry names, and its tile (None: whole cards).

    ``N``, ``N.M``; with ``wildcards`` also ``N.*``, ``*`` and ``gpu``.
    """
    if wildcards and entry.lower() in ("*", "gpu"):
        return list(range(len(devices))), None
    card, dot, tile = entry.partition(".")
    tile_ok = _is_index(tile) or (wildcards and tile == "*")
    if not _is_index(card) or (dot and not tile_ok):
        forms = "N, N.M, N.*, * or gpu" if wildcards else "N or N.M (card.tile)"
        raise ConfigError(
            f"{variable}={value!r}: entry {entry!r} is not a device ({forms}, N counting "
            "Level Zero devices from 0)"
        )
    if int(card) >= len(devices):
        raise ConfigError(
            f"{variable}={value!r}: entry {entry!r} names no GPU "
            f"({_existing(devices, by_physical=False)})"
        )
    return [int(card)], (int(tile) if _is_index(tile) else None)


def _driver_order(key: Tuple[int, Optional[int]]) -> Tuple[int, int]:
    """Level Zero's order of a (card, tile) device: by card, a whole card before its tiles."""
    card, tile = key
    return card, -1 if tile is None else tile


def _level_zero_select(
    devices: Sequence[Gpu], value: str, variable: str, *, wildcards: bool = False
) -> Tuple[List[Gpu], List[str]]:
    """``devices`` as the Level Zero entries of ``value`` select them (see the module).

    A device is a card (tile None: the whole card) or one tile of one.  An
    entry naming one already listed -- the same tile, or any part of a card
    listed whole -- is skipped, as the driver's mask keeps one bit each.
    ``ZE_AFFINITY_MASK`` (no ``wildcards``) is a mask: what it keeps comes in
    the driver's order (card, then tile); the selector keeps its entries'
    order.
    """
    picked: Dict[Tuple[int, Optional[int]], str] = {}  # (card, tile) -> the entry
    notes: List[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        positions, tile = _level_zero_entry(entry, devices, variable, value, wildcards)
        for card in positions:
            first = picked.get((card, None)) or picked.get((card, tile))
            if first is None and tile is None:  # a card named whole after some of its tiles
                first = next((e for (c, _), e in picked.items() if c == card), None)
            if first is not None:
                notes.append(
                    f"{variable}={value!r}: entry {entry!r} names a device entry {first!r} "
                    "listed already; Level Zero lists it once"
                )
                continue
            picked[(card, tile)] = entry
    keys = list(picked) if wildcards else sorted(picked, key=_driver_order)
    if not wildcards and keys != list(picked):
        notes.append(
            f"{variable}={value!r}: Level Zero lists the devices it keeps in its own order "
            "(cards in PCI address order), not in the order of the entries"
        )
    if any(tile is not None for _, tile in picked):
        notes.append(
            f"{variable}={value!r}: each card.tile entry is counted as one device, placed "
            "on its card's NUMA node (an index counting cards, as in Level Zero's COMPOSITE "
            "hierarchy)"
        )
    return [devices[card] for card, _ in keys], notes


def _oneapi_entries(value: str) -> Tuple[Optional[str], List[str]]:
    """The Level Zero device entries of ``ONEAPI_DEVICE_SELECTOR``, and notes."""
    entries: List[str] = []
    notes: List[str] = []
    for term in (t.strip() for t in value.split(";")):
        if not term:
            continue
        if term.startswith("!"):
            raise ConfigError(
                f"ONEAPI_DEVICE_SELECTOR={value!r}: discard term {term!r} is not read by "
                "pynumabind; name the devices to keep instead"
            )
        backend, colon, devices = term.partition(":")
        if not colon or not devices.strip():
            raise ConfigError(
                f"ONEAPI_DEVICE_SELECTOR={value!r}: term {term!r} is not backend:devices"
            )
        if backend.strip().lower() not in ("level_zero", "*"):
            notes.append(
                f"ONEAPI_DEVICE_SELECTOR term {term!r} is not for Level Zero; "
                "it does not choose Intel GPUs here"
            )
            continue
        entries.extend(d.strip() for d in devices.split(","))
    return (",".join(entries) if entries else None), notes


def _intel_visible(
    intel_side: Sequence[Gpu], env: Mapping[str, str]
) -> Tuple[List[Gpu], List[str]]:
    """Intel GPUs: ``ZE_AFFINITY_MASK``, then ``ONEAPI_DEVICE_SELECTOR`` over what it left."""
    chosen = sorted(intel_side, key=lambda g: g.pci_bus_id)
    notes: List[str] = []
    mask = env.get("ZE_AFFINITY_MASK")
    if mask is not None and mask.strip():  # empty: every device, as unset
        chosen, mask_notes = _level_zero_select(chosen, mask, "ZE_AFFINITY_MASK")
        notes += mask_notes
    selector = env.get("ONEAPI_DEVICE_SELECTOR")
    if selector is not None:
        entries, selector_notes = _oneapi_entries(selector)
        notes += selector_notes
        if entries is not None:
            chosen, more = _level_zero_select(
                chosen, entries, "ONEAPI_DEVICE_SELECTOR", wildcards=True
            )
            notes += more
    return chosen, notes


def apply_visibility(
    topology: Topology,
    environ: Optional[Mapping[str, str]] = None,
    *,
    mig_parents: Optional[Mapping[str, str]] = None,
) -> Topology:
    """``topology`` with ``gpus`` = the devices this process sees, in its order.

    ``topology.gpus`` should list every GPU with its driver ``physical_index``
    (what discovery produces, and what ``pynumabind snapshot`` records);
    index entries are matched by physical index, and a topology already
    filtered (``visibility`` set) is accepted only under the same settings
    (see the module docstring).  ``environ`` defaults to ``os.environ``.

    Args:
        topology: The machine, every GPU listed with its physical index.
        environ: Where ``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER``,
            ``ROCR_VISIBLE_DEVICES`` and friends come from.
        mig_parents: MIG UUID -> its GPU's UUID (from NVML), so
            ``MIG-<uuid>`` entries can be resolved.

    Returns:
        A copy of ``topology`` whose ``gpus`` are the visible ones, indexed
        as CUDA (or ROCm) numbers them in this process.

    Raises:
        ConfigError: ``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER`` or a
            friend has a bad value, or names a GPU by UUID where no UUID is
            known.
        TopologyError: ``topology`` was filtered under other settings, or
            ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` meets a filtered GPU list.
    """
    env = os.environ if environ is None else environ
    settings = _settings(env)
    if topology.visibility is not None:
        return _already_applied(topology, settings)
    notes: List[str] = []
    denied = topology.denied_gpus
    cuda_side = [g for g in topology.gpus if g.vendor not in ("amd", "intel")]
    amd_side = [g for g in topology.gpus if g.vendor == "amd"]
    intel_side = [g for g in topology.gpus if g.vendor == "intel"]
    visible: List[Gpu] = []
    if cuda_side:
        chosen, cuda_notes = _cuda_visible(cuda_side, env, mig_parents, denied)
        notes += cuda_notes
        visible += chosen
    if amd_side:
        chosen, amd_notes = _amd_visible(amd_side, env, bool(cuda_side), denied)
        notes += amd_notes
        visible += chosen
    if intel_side:
        chosen, intel_notes = _intel_visible(intel_side, env)
        notes += intel_notes
        visible += chosen
    if sum(map(bool, (cuda_side, amd_side, intel_side))) > 1:
        notes.append(
            "GPUs of several vendors are present: they are listed NVIDIA (and others) "
            "first, then AMD, then Intel"
        )
    hidden = len(visible) < len(topology.gpus)
    out = topology.replace(
        gpus=_renumber(visible),
        notes=topology.notes + tuple(notes),
        visibility=settings if hidden else None,
    )
    warning = out.hidden_gpus_warning()
    return out.replace(notes=(*out.notes, warning)) if warning else out


def visibility_note(
    topology: Topology,
    environ: Mapping[str, str],
    *,
    applied: bool,
    recorded_by: Optional[str] = None,
) -> Optional[str]:
    """One line on what was done with the visible-device variables set in ``environ``.

    ``None`` when none is set.  ``applied``: ``topology`` is what this
    process sees, so the line names those GPUs by physical index, in the
    process's order.  Otherwise ``topology`` is a recorded machine planned as
    recorded (``recorded_by``: the option that named it, ``--topology`` or
    ``--sysfs-root``), and the line says the variables were not applied, and
    how to apply them.
    """
    settings = _settings(environ)
    if not settings:
        return None
    shown = ", ".join(f"{name}={value!r}" for name, value in settings)
    gpus = len(topology.gpus)
    if not applied:
        how = (
            " (the variables name this machine's devices, not that one's); "
            "PYNUMABIND_TOPOLOGY=FILE plans this process on that machine, with them applied"
            if recorded_by == "--topology"
            else ""
        )
        return (
            f"{shown}: not applied; the machine of {recorded_by or 'the recording'} is planned "
            f"as recorded, {counted(gpus, 'GPU')}{how}"
        )
    if not gpus:
        return f"{shown}: applied; this process sees no GPU"
    physical = [g.physical_index for g in topology.gpus]
    named = ", ".join("?" if p is None else str(p) for p in physical)
    here = "0" if gpus == 1 else f"0-{gpus - 1}"
    return (
        f"{shown}: applied; this process sees {counted(gpus, 'GPU')}: the machine's {named} "
        f"(driver numbering), numbered {here} here"
    )
