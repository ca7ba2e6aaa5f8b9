"""The advice record's file: reading its text, and saving it atomically.

Reading
-------
:func:`read_text` reads a regular file only, at most
:data:`~pynumabind.records._json.MAX_RECORD_BYTES`, as UTF-8; anything else
is an :class:`~pynumabind.AdviceRecordError` naming the file.

Saving
------
The write is atomic: the record goes to a temporary file in the same
directory (created, mode 0755, when missing), is flushed to disk, made
readable by every account (0644), and renamed over the target, so a worker
reads the old record or the new one, never half of one.  A file already at
the path that is not an advice record (no ``"record": "pynumabind
advice"``: a directory, a FIFO, someone's JSON, a typo'd path to a config
file) is never overwritten: :class:`~pynumabind.AdviceRecordError`
(:func:`refuse_foreign`, which ``pynumabind advise --save`` also runs before
it measures).  Where the file goes when no path is given is
:mod:`pynumabind.records._paths`'s rule.
"""

from __future__ import annotations

import datetime
import json
import os
import stat
import tempfile
from typing import TYPE_CHECKING, Mapping, Optional

from .._version import __version__
from ..errors import AdviceRecordError
from ._host import this_machine
from ._json import MAX_RECORD_BYTES, is_record, record_dict
from ._paths import ADVICE_VARIABLE, save_path

if TYPE_CHECKING:  # pragma: no cover
    from ._machine import Machine
    from .advice import Advice

__all__ = ["read_text", "refuse_foreign", "save_record"]


def read_text(path: str) -> str:
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
        text = read_text(path)
        document = json.loads(text)
    except (AdviceRecordError, ValueError, RecursionError):
        document = None
    if not is_record(document):
        raise AdviceRecordError(
            f'refusing to overwrite {path}: it is not an advice record (no "record": '
            '"pynumabind advice" key); remove it or choose another path'
        )


def save_record(
    advice: Advice,
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
