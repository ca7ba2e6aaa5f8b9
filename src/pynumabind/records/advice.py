"""The advice: what :func:`pynumabind.advise` measured and recommends, and the record keeping it.

:class:`Advice` is one class for every use: :func:`pynumabind.advise`
returns it, ``str(advice)`` is the report ``pynumabind advise`` prints
(:func:`pynumabind.records.report.render_text`), :meth:`Advice.to_dict` is
its documented JSON, :meth:`Advice.save` keeps it as this machine's advice
record, and :func:`pynumabind.load_advice` reads one back.  The values it
holds are :mod:`pynumabind.records.values`'.

:class:`Record` is a saved advice with the machine it was measured on, when,
and by which version; :func:`parse_record` reads one from a file's text (the
checks are :mod:`pynumabind.records._json`'s: every key, typed, and an error
naming the file and the key; then :mod:`pynumabind.records._validate`'s
rules on the values).

Nothing here reads or writes on import, but :meth:`Advice.save` writes a
file (:mod:`pynumabind.records._file`, imported when called), so this module
is not one of the pure ones: the values, their JSON and the report do not
import it, and stay pure.  Its public name is ``pynumabind.Advice``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from .._text import escaped
from ..errors import AdviceRecordError
from . import _json, _validate
from ._machine import Machine
from .values import Firmware, GpuCopies, MemoryMatrix, Recommendation

__all__ = [
    "Advice",
]


@dataclass(frozen=True)
class Advice:
    """Everything :func:`pynumabind.advise` measured and read, and what it recommends.

    ``str(advice)`` (``print(advice)``) is the report ``pynumabind advise``
    prints; :meth:`to_dict` is its JSON form (``pynumabind advise --json``);
    :meth:`save` keeps it as this machine's advice record, which mode
    ``advised`` follows.
    """

    memory: Optional[MemoryMatrix]
    copies: Tuple[GpuCopies, ...]
    copies_status: str  # why no copies were measured, or which backend measured them
    copies_backend: Optional[str]
    firmware: Optional[Firmware]
    recommendation: Recommendation
    quick: bool = False
    seconds: float = 0.0
    notes: Tuple[str, ...] = ()

    @property
    def bind(self) -> bool:
        return self.recommendation.bind

    def __str__(self) -> str:
        """The report ``pynumabind advise`` prints.

        As :func:`pynumabind.records.report.render_text` renders it.
        """
        from .report import render_text

        return render_text(self)

    def to_dict(self) -> Dict[str, Any]:
        """The documented JSON form (``pynumabind advise --json``)."""
        return {
            "schema": _json.RECORD_SCHEMA,  # the advice's own (see records._json)
            "quick": self.quick,
            "seconds": round(self.seconds, 2),
            "memory": None if self.memory is None else self.memory.to_dict(),
            "copies": [g.to_dict() for g in self.copies],
            "copies_status": {
                "measured": bool(self.copies),
                "backend": self.copies_backend,
                "reason": self.copies_status,
            },
            "firmware": None if self.firmware is None else self.firmware.to_dict(),
            "recommendation": self.recommendation.to_dict(),
            "notes": list(self.notes),
        }

    def save(self, path: Optional[str] = None) -> str:
        """Write this advice as the machine's advice record; returns the absolute path written.

        ``path`` is a record file, or a directory of records when it ends
        with ``/`` or is an existing directory: the record is then written
        under its machine type's file name, replacing the record of this
        type and no other.  It defaults to the path rule's place
        (``PYNUMABIND_ADVICE``, else the system-wide directory
        ``/var/lib/pynumabind/`` as root, the per-user one otherwise: see
        :mod:`pynumabind.advisor.record`).  Missing directories are created
        (logged at INFO), directories mode 0755 and the record 0644 whatever
        the umask, so workers under every account read it.  The write is
        atomic (a worker reads the old record or the new one), and never
        over a file that is not an advice record.

        Raises:
            AdviceRecordError: the path is not an advice record, or cannot be
                created or written (the message names it and how to choose
                another).
        """
        from ._file import save_record

        return save_record(self, path)


@dataclass(frozen=True)
class Record:
    """A saved advice record: what was measured, where, when, and the file it came from."""

    advice: Advice
    machine: Machine
    saved: str
    version: str
    path: Optional[str] = None

    def quoted(self) -> str:
        """``the advice record /path (saved ...) says "..."``: for reasons and reports.

        The path is escaped as the record's own text is (a file name in a
        shared directory is text from outside too).
        """
        where = f"the advice record {escaped(self.path)}" if self.path else "the advice record"
        return f'{where} (saved {self.saved}) says "{self.advice.recommendation.verdict}"'


def parse_record(text: str, path: Optional[str] = None) -> Record:
    """The :class:`Record` in ``text``.

    Not a record, or a corrupt one: an :class:`~pynumabind.AdviceRecordError`
    naming ``path`` and the key (see :mod:`pynumabind.records._json`); so is
    one whose values break a rule of :mod:`pynumabind.records._validate` (a
    negative node id, a node listed twice, a verdict the rule cannot give).
    """
    found = _json.read_record(text, path)
    record = Record(Advice(**found.advice), found.machine, found.saved, found.version, path)
    problem = _validate.first(_validate.record_problems(record))  # ids, counts, the verdict
    if problem is not None:
        where = f"advice record {path}" if path else "advice record"
        raise AdviceRecordError(f"{where}: {problem}")
    return record
