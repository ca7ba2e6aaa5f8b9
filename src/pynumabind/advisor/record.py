"""The advice record on disk: where it lives, saving it, loading it, and mode ``advised``.

The home of the record's names: ``pynumabind advise --save`` writes the
record (:meth:`pynumabind.Advice.save`), :func:`load_advice` (also
``pynumabind.load_advice``) reads it back, and mode ``advised`` follows it
in every worker (:func:`resolve_advised`).  Its public API (``__all__``, in
the reference) is ``Advice`` and ``load_advice``; the other names stay
importable here for tools and tests, without a promise.  The names are defined below the
binding, in :mod:`pynumabind.records.store`, so that a worker reads the
record without importing the advisor; that module's docstring holds the
rules: where the record lives (``PYNUMABIND_ADVICE``, else the per-user
file, else the system-wide one), the atomic save that never overwrites a
file that is not a record, what makes a record stale, and what mode
``advised`` does with a record, a stale one, or none.
"""

from __future__ import annotations

from ..records.advice import Advice, Record
from ..records.store import (
    ADVICE_VARIABLE,
    SAVE_COMMAND,
    SYSTEM_PATH,
    Advised,
    Machine,
    MachineGpu,
    MachineNode,
    advice_path,
    load_advice,
    load_record,
    read_paths,
    refuse_foreign,
    resolve_advised,
    save_path,
    save_record,
    staleness,
    this_machine,
)

__all__ = [
    "Advice",
    "load_advice",
]
