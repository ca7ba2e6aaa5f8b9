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
  named twice also ends it (assumption: CUDA does not expose one GPU twice);
* ``CUDA_DEVICE_ORDER``: ``PCI_BUS_ID`` sorts by PCI address;
  ``FASTEST_FIRST`` (the default) makes CUDA rank devices by compute
  capability and SM count, which needs the CUDA runtime.  pynumabind
  approximates it by driver (NVML) order, which is exact when all GPUs are
  one model, and leaves a note when models differ.  Anything else is a
  :class:`ConfigError`.

AMD rules: ``ROCR_VISIBLE_DEVICES`` (indices into KFD order, or UUIDs)
selects first; ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``, which HIP
honours when HIP's own variable is unset) then indexes into what ROCr left.
The same truncation rule is applied (assumption, documented).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple

from .errors import ConfigError
from .model import Gpu, Topology

__all__ = [
    "CUDA_DEVICE_ORDERS",
    "apply_visibility",
    "cuda_device_order",
    "mig_uuids",
    "select_visible",
]

CUDA_DEVICE_ORDERS = ("FASTEST_FIRST", "PCI_BUS_ID")


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
) -> Tuple[Optional[int], str, bool]:
    """(position in ``devices`` or None, why not, is a MIG name) for one entry."""
    upper = token.upper()
    if token.isascii() and token.isdigit():  # str.isdigit() also takes "²", "١"
        number = int(token)
        if number < len(devices):
            return number, "", False
        return None, f"is out of range (there are {len(devices)} devices)", False
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
) -> Tuple[List[Gpu], List[str]]:
    """Apply one visible-devices variable to ``devices`` (already in order).

    Returns the selected devices in process order, and notes explaining any
    entry that was dropped.  A UUID entry when no device has a known UUID is
    a :class:`ConfigError` unless ``unknown_uuids_fatal`` is false (HIP
    reading CUDA_VISIBLE_DEVICES that names NVIDIA GPUs).
    """
    if value is None:
        return list(devices), []
    if not value.strip():
        return [], [f"{variable} is empty: no GPUs are visible"]
    chosen: List[Gpu] = []
    notes: List[str] = []
    used: set[int] = set()
    tokens = value.split(",")
    for position, raw in enumerate(tokens):
        token = raw.strip()
        where, why, mig = _resolve(
            token,
            devices,
            variable=variable,
            mig_parents=mig_parents,
            unknown_uuids_fatal=unknown_uuids_fatal,
        )
        if where is not None and where in used and not mig:
            where, why = None, "names a device already listed"
        if where is None:
            dropped = ",".join(t.strip() for t in tokens[position:])
            notes.append(
                f"{variable}={value!r}: entry {token!r} {why}; like CUDA, it and every "
                f"later entry are ignored ({dropped})"
            )
            break
        used.add(where)
        chosen.append(devices[where])
    return chosen, notes


def _renumber(gpus: Iterable[Gpu]) -> Tuple[Gpu, ...]:
    return tuple(replace(g, index=i) for i, g in enumerate(gpus))


def apply_visibility(
    topology: Topology,
    environ: Optional[Mapping[str, str]] = None,
    *,
    mig_parents: Optional[Mapping[str, str]] = None,
) -> Topology:
    """``topology`` with ``gpus`` = the devices this process sees, in its order.

    ``topology.gpus`` must list every GPU with its driver ``physical_index``
    (what discovery produces).  ``environ`` defaults to ``os.environ``.
    """
    env = os.environ if environ is None else environ
    notes: List[str] = []
    cuda_side = [g for g in topology.gpus if g.vendor != "amd"]
    amd_side = [g for g in topology.gpus if g.vendor == "amd"]
    visible: List[Gpu] = []
    if cuda_side:
        ordered, order_notes = cuda_device_order(cuda_side, env)
        notes += order_notes
        chosen, select_notes = select_visible(
            ordered,
            env.get("CUDA_VISIBLE_DEVICES"),
            variable="CUDA_VISIBLE_DEVICES",
            mig_parents=mig_parents,
        )
        notes += select_notes
        visible += chosen
    if amd_side:
        ordered = sorted(amd_side, key=lambda g: (g.physical_index is None, g.physical_index or 0))
        rocr, rocr_notes = select_visible(
            ordered, env.get("ROCR_VISIBLE_DEVICES"), variable="ROCR_VISIBLE_DEVICES"
        )
        hip_variable = "HIP_VISIBLE_DEVICES"
        if env.get(hip_variable) is None and env.get("CUDA_VISIBLE_DEVICES") is not None:
            hip_variable = "CUDA_VISIBLE_DEVICES"
        hip, hip_notes = select_visible(
            rocr,
            env.get(hip_variable),
            variable=hip_variable,
            unknown_uuids_fatal=not (cuda_side and hip_variable == "CUDA_VISIBLE_DEVICES"),
        )
        notes += rocr_notes + hip_notes
        visible += hip
    if cuda_side and amd_side:
        notes.append("both NVIDIA and AMD GPUs are present: NVIDIA ones are listed first")
    return topology.replace(gpus=_renumber(visible), notes=topology.notes + tuple(notes))
