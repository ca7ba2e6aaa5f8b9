"""The advice record's file: reading its text, and saving it atomically.

Reading
-------
:func:`read_text` reads a regular file only, at most
:data:`~pynumabind.records._json.MAX_RECORD_BYTES`, as UTF-8; anything else
is an :class:`~pynumabind.AdviceRecordError` naming the file.

Listing a directory, and whether a place exists
-----------------------------------------------
:func:`scan_names` lists a directory of records, bounded (the entries looked
at, at most a given number), and :func:`place_exists` tells a missing place
from one this account may not look at: both translate the OS's errors into
an :class:`~pynumabind.AdviceRecordError` naming the place, here, so the
modules that choose records (:mod:`pynumabind.records._directory`,
:mod:`pynumabind.records.store`) catch no ``OSError``.

Saving
------
:func:`prepare_save` is everything that can be checked before the record
exists, so ``pynumabind advise --save`` runs it before it measures, and
:func:`save_record` runs it again before it writes:

* **where**: the path rule's place (:mod:`pynumabind.records._paths`); in a
  directory, the file its machine type gets
  (:func:`~pynumabind.records._machine.record_name`), so a save replaces the
  record of its own type (a stale one included) and no other;
* **not over something else**: a file already at the path that is not an
  advice record (no ``"record": "pynumabind advice"``: a directory, a FIFO,
  someone's JSON, a typo'd path to a config file) is never overwritten
  (:func:`refuse_foreign`);
* **its directory**: missing directories are created, each mode 0755
  whatever the umask (``chmod`` after ``mkdir``), and named in
  :attr:`SaveTarget.created` (``advise --save`` says so on stderr; the
  library logs it at INFO), never silently;
* **writable**: a temporary file is created in the directory and removed
  again, so a read-only file system (as root too), a full quota or a
  permission are found now, not after measuring.

The write itself is atomic: the record goes to a temporary file
(``.advice-*.tmp``, hidden from the readers) in the same directory, is
flushed to disk, made readable by every account (``fchmod`` 0644, whatever
the umask), and renamed over the target, so a worker reads the old record or
the new one, never half of one, and racing writers leave one whole record per
file and no temporary file.  Anything that fails is an
:class:`~pynumabind.AdviceRecordError` naming the path.

:func:`others_cannot_read` says when a place is not readable by every
account (a directory on the way without ``o+x``, as a umask of 077 leaves
the ones made by hand), which ``advise --save`` warns about: workers under
other accounts would find no record.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import stat
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Mapping, Optional, Tuple

from .._version import __version__
from ..errors import AdviceRecordError
from ._host import this_machine
from ._json import MAX_RECORD_BYTES, is_record, record_dict
from ._machine import record_name
from ._paths import ADVICE_VARIABLE, names_directory, save_path

if TYPE_CHECKING:  # pragma: no cover
    from ._machine import Machine
    from .advice import Advice

__all__ = [
    "DIRECTORY_MODE",
    "FILE_MODE",
    "SaveTarget",
    "others_cannot_read",
    "place_exists",
    "prepare_save",
    "read_text",
    "refuse_foreign",
    "save_record",
    "scan_names",
]

log = logging.getLogger(__name__)

#: Every directory made for records, and every record: readable by every account.
DIRECTORY_MODE = 0o755
FILE_MODE = 0o644


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


def scan_names(directory: str, limit: int) -> Tuple[List[str], bool]:
    """The names in ``directory``, at most ``limit`` entries looked at; whether more were left.

    Raises:
        AdviceRecordError: the directory is missing, not a directory, or
            cannot be listed (naming it).
    """
    names: List[str] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if len(names) >= limit:
                    return names, True
                names.append(entry.name)
    except FileNotFoundError as exc:
        raise AdviceRecordError(
            f"the directory of advice records {directory} does not exist"
        ) from exc
    except NotADirectoryError as exc:
        raise AdviceRecordError(f"{directory} is not a directory of advice records") from exc
    except OSError as exc:
        raise AdviceRecordError(
            f"cannot read the directory of advice records {directory}: {exc.strerror or exc}"
        ) from exc
    return names, False


def place_exists(place: str) -> bool:
    """Something is at ``place``: ``x.json/`` exists where a file ``x.json`` does.

    A place this account may not look at (a directory on the way without
    ``x`` for it) is an AdviceRecordError saying so, not a missing record.
    """
    try:
        os.lstat(place.rstrip(os.sep) or os.sep)
    except PermissionError as exc:
        raise AdviceRecordError(
            f"cannot read the advice record {place}: {exc.strerror} (a directory on the way "
            "is closed to this account: save it with `pynumabind advise --save`, which makes "
            "its directories readable by every account)"
        ) from exc
    except (OSError, ValueError):
        return False
    return True


def _cannot_write(target: str, exc: OSError) -> AdviceRecordError:
    where = f" ({exc.filename})" if exc.filename and exc.filename != target else ""
    return _cannot(target, f"{exc.strerror or exc}{where}")


def _cannot(target: str, why: str) -> AdviceRecordError:
    return AdviceRecordError(
        f"cannot write the advice record {target}: {why}; name a place you may write with "
        f"{ADVICE_VARIABLE}=DIR/ (or FILE) or advise --save DIR/"
    )


def refuse_foreign(path: str) -> None:
    """An AdviceRecordError when something that is not an advice record is at ``path``."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # nothing there (a file on the way: later)
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


@dataclass(frozen=True)
class SaveTarget:
    """Where a record will be written, checked (:func:`prepare_save`).

    ``file``: the record's absolute path; ``directory``: the directory it is
    written in; ``in_directory``: the place named a directory of records (the
    file name is the machine type's); ``created``: the directories made for
    it, outermost first, each mode 0755.
    """

    file: str
    directory: str
    in_directory: bool
    created: Tuple[str, ...] = ()


def _make_directories(directory: str, target: str) -> Tuple[str, ...]:
    """Create ``directory`` and its missing parents, each mode 0755 whatever the umask."""
    missing: List[str] = []
    here = directory
    while not os.path.isdir(here):
        if os.path.lexists(here):
            if os.path.isdir(here):  # a racing writer made it since the test above
                break
            raise _cannot(target, f"{here} is not a directory")
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:  # pragma: no cover - the root always exists
            break
        here = parent
    created: List[str] = []
    for path in reversed(missing):
        try:
            os.mkdir(path, DIRECTORY_MODE)
        except FileExistsError:  # a racing writer made it: its mode is its own business
            if os.path.isdir(path):
                continue
            raise _cannot(target, f"{path} is not a directory") from None
        except OSError as exc:
            raise _cannot_write(target, exc) from exc
        try:
            os.chmod(path, DIRECTORY_MODE)  # mkdir's mode is masked by the umask
        except OSError as exc:
            raise _cannot_write(target, exc) from exc
        created.append(path)
    return tuple(created)


def _try_write(directory: str, target: str) -> None:
    """Create and remove a temporary file in ``directory``: an error now, not after measuring."""
    try:
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".advice-", suffix=".tmp")
    except OSError as exc:
        raise _cannot_write(target, exc) from exc
    os.close(handle)
    try:
        os.unlink(temporary)
    except OSError:
        pass


def prepare_save(
    path: Optional[str] = None,
    *,
    environ: Optional[Mapping[str, str]] = None,
    machine: Optional[Machine] = None,
) -> SaveTarget:
    """Check (and make) the place a record of ``machine`` (default: this one) will be written.

    ``path`` is a file or a directory by the path rule (default: the rule's
    place for the writer).  See the module docstring for what is checked and
    created.

    Raises:
        AdviceRecordError: the path is invalid, holds something that is not
            an advice record, or cannot be created or written (the message
            names it).
    """
    env = os.environ if environ is None else environ
    given = save_path(env) if path is None else path
    if not given or "\0" in given:
        raise AdviceRecordError(f"invalid advice record path {given!r}")
    in_directory = names_directory(given)
    if in_directory:
        directory = os.path.abspath(given)
        machine = this_machine() if machine is None else machine
        target = os.path.join(directory, record_name(machine))
    else:
        target = os.path.abspath(given)
        directory = os.path.dirname(target)
    refuse_foreign(target)
    created = _make_directories(directory, target)
    for made in created:
        log.info("created the directory %s (mode 0755) for the advice record", made)
    _try_write(directory, target)
    return SaveTarget(target, directory, in_directory, created)


def others_cannot_read(target: SaveTarget) -> Optional[str]:
    """Why an account other than the owner could not read the record, or None.

    Every directory from ``/`` to the record's needs ``o+x``, and its own
    directory ``o+r`` too when it is a directory of records (the readers list
    it).
    """
    here = target.directory
    while True:
        try:
            mode = os.stat(here).st_mode
        except OSError:
            return None  # cannot tell; the write itself says what is wrong
        need = stat.S_IXOTH | (
            stat.S_IROTH if here == target.directory and target.in_directory else 0
        )
        if mode & need != need:
            return (
                f"{here} is mode {stat.S_IMODE(mode):04o}: workers under other accounts cannot "
                f"read the advice record {target.file} (chmod o+rx {here})"
            )
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _write(target: str, directory: str, text: str) -> None:
    """Write ``text`` to ``target`` atomically, mode 0644 (module docstring)."""
    temporary: Optional[str] = None
    try:
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".advice-", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
            os.fchmod(out.fileno(), FILE_MODE)  # mkstemp's 0600, whatever the umask
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


def save_record(
    advice: Advice,
    path: Optional[str] = None,
    *,
    environ: Optional[Mapping[str, str]] = None,
    machine: Optional[Machine] = None,
) -> str:
    """Write ``advice`` and ``machine`` (default: this one) atomically; the absolute file path.

    ``path`` is a file or a directory (default: the path rule's place); in a
    directory, the record's name is its machine type's.  See the module
    docstring for what is checked, created and refused.
    """
    machine = this_machine() if machine is None else machine
    target = prepare_save(path, environ=environ, machine=machine)
    saved = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = json.dumps(record_dict(advice, machine, saved, __version__), indent=2) + "\n"
    _write(target.file, target.directory, text)
    return target.file
