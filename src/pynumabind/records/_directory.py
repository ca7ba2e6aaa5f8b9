"""A directory of advice records: which one a machine follows, and what the others are.

A directory holds one record per machine type, any number of types
(:mod:`pynumabind.records._paths` says when a path is a directory;
:mod:`pynumabind.records._machine` what a type is).  It may be shared and
slow -- NFS, a Kubernetes ConfigMap, a Slurm cluster's shared file system --
and read-only to the readers, so reading it writes nothing and its work is
bounded:

* **the fast path**: the file this machine's type is saved under
  (:func:`~pynumabind.records._machine.record_name`) is read first; when its
  fingerprint matches (it does, unless it was edited by hand), that is the
  record, and the directory is not even listed;
* **otherwise** the directory is listed (at most :data:`MAX_DIRECTORY_ENTRIES`
  entries looked at) and its record files read, at most
  :data:`MAX_DIRECTORY_RECORDS` of them in name order, each bounded as a
  single record is (:func:`pynumabind.records._file.read_text`).  A record
  file is one whose name ends in ``.json`` and does not start with ``.``
  (the writers' temporary files are ``.advice-*.tmp``).

Which record a machine follows: one whose fingerprint matches its machine
(:func:`~pynumabind.records._machine.staleness` finds no difference); when
several do (a record saved under another name, such as the old default
``advice.json``, or two machines of one type whose memory sizes straddle a
class), the one under this machine type's own name, else the newest saved,
then the first by name.  The others are ignored, without a warning; files
that cannot be read or are not records are ignored the same way.  When none
matches, :meth:`Listing.problem` is the one warning's text: the directory,
how many records it holds (and how many files could not be read), and the
closest record (fewest differences) with its differences.

Nothing here decides what to do with the record: :mod:`pynumabind.records.store`
follows it, and ``pynumabind records`` prints a :class:`Listing`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from .._text import counted
from ..errors import AdviceRecordError
from ._file import read_text, scan_names
from ._machine import Machine, record_name, staleness
from .advice import Record, parse_record

__all__ = [
    "MAX_DIRECTORY_ENTRIES",
    "MAX_DIRECTORY_RECORDS",
    "THIS_MACHINE",
    "Listing",
    "RecordEntry",
    "choose",
    "find_in_directory",
    "is_record_name",
    "list_directory",
    "read_entry",
]

#: What the messages call the machine compared, unless told another name.
THIS_MACHINE = "this machine"

#: Directory entries looked at, at most, when the directory is listed.
MAX_DIRECTORY_ENTRIES = 4096
#: Record files read, at most, from one directory (in name order).
MAX_DIRECTORY_RECORDS = 256


@dataclass(frozen=True)
class RecordEntry:
    """One file of a place: its record and how it compares, or why it cannot be read.

    ``record`` is None when the file cannot be read as an advice record
    (``problem`` says why); ``differences`` are what makes the record's
    machine another one than the machine compared (empty: it matches).
    """

    path: str
    record: Optional[Record]
    problem: Optional[str] = None
    differences: Tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The file's name."""
        return os.path.basename(self.path)

    @property
    def matches(self) -> bool:
        """A readable record of the machine compared."""
        return self.record is not None and not self.differences


@dataclass(frozen=True)
class Listing:
    """What one place holds, compared with one machine.

    ``path``: the place as named; ``directory``: whether it is a directory of
    records (else one record file); ``entries``: its record files in name
    order (a fast-path listing holds only the file that was followed);
    ``followed``: the entry the machine follows, or None; ``complete``: every
    record file was read; ``not_read``: record files beyond
    :data:`MAX_DIRECTORY_RECORDS` (and entries beyond
    :data:`MAX_DIRECTORY_ENTRIES`) that were left unread.
    """

    path: str
    directory: bool
    entries: Tuple[RecordEntry, ...]
    followed: Optional[RecordEntry]
    complete: bool = True
    not_read: int = 0

    @property
    def records(self) -> Tuple[RecordEntry, ...]:
        """The entries that are readable records."""
        return tuple(e for e in self.entries if e.record is not None)

    def problem(self, machine_name: str = THIS_MACHINE) -> str:
        """Why nothing here is followed: the warning's text (module docstring)."""
        if not self.directory:
            (entry,) = self.entries
            if entry.record is None:
                return entry.problem or f"the advice record {self.path} cannot be read"
            what = (
                "is stale, this machine changed or is another one"
                if machine_name == THIS_MACHINE
                else f"is not a record of {machine_name}"
            )
            return (
                f"the advice record {self.path} (saved {entry.record.saved}) {what}: "
                f"{'; '.join(entry.differences)}"
            )
        readable = self.records
        unreadable = len(self.entries) - len(readable)
        held = counted(len(readable), "record")
        if unreadable:
            held += f" and {counted(unreadable, 'file')} that cannot be read as one"
        if self.not_read:
            held += f"; {self.not_read} more not read"
        if not readable:
            return f"no advice record in {self.path} (it holds {held})"
        closest = min(readable, key=lambda e: (len(e.differences), e.name))
        assert closest.record is not None
        return (
            f"no advice record for {machine_name} in {self.path} (it holds {held}, of other "
            f"machines); the closest, {closest.name} (saved {closest.record.saved}: "
            f"{closest.record.machine.text()}), differs: {'; '.join(closest.differences)}"
        )


def is_record_name(name: str) -> bool:
    """Whether a directory entry counts as a record file: ``*.json``, not hidden."""
    return name.endswith(".json") and not name.startswith(".")


def read_entry(path: str, machine: Machine) -> RecordEntry:
    """The record at ``path`` compared with ``machine``, or why it cannot be read."""
    try:
        record = parse_record(read_text(path), path)
    except AdviceRecordError as exc:
        return RecordEntry(path, None, str(exc))
    return RecordEntry(path, record, None, tuple(staleness(record.machine, machine)))


def choose(entries: Sequence[RecordEntry], own_name: Optional[str]) -> Optional[RecordEntry]:
    """The entry a machine follows among ``entries`` (module docstring), or None."""
    matching = [e for e in entries if e.matches]
    if not matching:
        return None
    for entry in matching:
        if entry.name == own_name:
            return entry
    by_name = sorted(matching, key=lambda e: e.name)
    return max(by_name, key=lambda e: e.record.saved if e.record is not None else "")


def _record_files(directory: str) -> Tuple[List[str], int]:
    """The record files' names, in name order, bounded; and how many were left out."""
    listed, more = scan_names(directory, MAX_DIRECTORY_ENTRIES)
    names = sorted(name for name in listed if is_record_name(name))
    left = len(names) - MAX_DIRECTORY_RECORDS
    return names[:MAX_DIRECTORY_RECORDS], max(left, 0) + (1 if more else 0)


def list_directory(path: str, machine: Machine) -> Listing:
    """Every record file of directory ``path`` (bounded), compared with ``machine``.

    Raises:
        AdviceRecordError: the directory is missing, not a directory, or
            cannot be listed.
    """
    names, not_read = _record_files(path)
    entries = tuple(read_entry(os.path.join(path, name), machine) for name in names)
    followed = choose(entries, record_name(machine))
    return Listing(path, True, entries, followed, complete=not not_read, not_read=not_read)


def find_in_directory(path: str, machine: Machine) -> Listing:
    """The record ``machine`` follows in directory ``path``: its own name first, else a listing.

    Raises:
        AdviceRecordError: as :func:`list_directory`, when the fast path
            finds nothing.
    """
    own = os.path.join(path, record_name(machine))
    if os.path.lexists(own):
        entry = read_entry(own, machine)
        if entry.matches:
            return Listing(path, True, (entry,), entry, complete=False)
    return list_directory(path, machine)
