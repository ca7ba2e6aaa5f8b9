"""The advice record on disk: where it lives, saving it, loading it, and mode ``advised``.

The public home of the record's names: ``pynumabind advise --save`` writes
the record (:meth:`pynumabind.Advice.save`), :func:`load_advice` (also
``pynumabind.load_advice``) reads it back, and mode ``advised`` follows it
in every worker (:func:`resolve_advised`).  The names are defined below the
binding, in :mod:`pynumabind.records.store`, so that a worker reads the
record without importing the advisor; that module's docstring holds the
rules: where the records live (``PYNUMABIND_ADVICE``, else the per-user
directory, else the system-wide one; a place is one record file or a
directory of records, one per machine type), the checked, atomic save that
never overwrites a file that is not a record, what makes a record stale,
which record a machine follows in a directory (:func:`list_records` shows
them all), and what mode ``advised`` does with a record, a stale one, or
none.
"""

from __future__ import annotations

from ..records.advice import Advice, Record
from ..records.store import (
    ADVICE_VARIABLE,
    MAX_DIRECTORY_RECORDS,
    SAVE_COMMAND,
    SYSTEM_PATH,
    Advised,
    Listing,
    Machine,
    MachineGpu,
    MachineNode,
    RecordEntry,
    SaveTarget,
    advice_path,
    list_records,
    load_advice,
    load_record,
    names_directory,
    others_cannot_read,
    prepare_save,
    read_paths,
    record_name,
    refuse_foreign,
    resolve_advised,
    save_path,
    save_record,
    snapshot_machine,
    staleness,
    this_machine,
)

__all__ = [
    "ADVICE_VARIABLE",
    "MAX_DIRECTORY_RECORDS",
    "SAVE_COMMAND",
    "SYSTEM_PATH",
    "Advice",
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
