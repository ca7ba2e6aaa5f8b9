"""A buffer's bytes as one address range: what ``bind_memory`` binds.

The rules are "Buffers" and "Which pages" in
:mod:`pynumabind.binding.placement`; this is how they are met.
:func:`open_buffer` takes what the caller gave and returns its :class:`Span`:

* an object with a buffer: held exported for the whole call
  (:class:`Exported`, a ``memoryview`` open, so a ``bytearray`` cannot be
  resized under it); a C-contiguous one's address comes from cffi's
  ``from_buffer``, any other dense layout (Fortran order, negative strides)
  is asked for through CPython's buffer API with its strides
  (:func:`_strided_address`), and its span worked out from its shape and
  strides (:func:`_extent`); one with gaps between its elements is refused;
* a CPU tensor, duck-typed by ``data_ptr()``, ``numel()`` and
  ``element_size()``, its span from ``size()``/``stride()`` when it has them
  (every byte from its lowest to its highest element); torch is never
  imported;
* an explicit ``(address, length)``.

Every span is checked to be a possible memory range (:func:`_checked`):
positive, and ending, page-aligned, below ``2**64``.  :func:`outward` aligns
a span outward to whole pages.
"""

from __future__ import annotations

import mmap
import operator
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from .._os import libnuma as _libnuma
from ..errors import ConfigError, NotABufferError, ReadOnlyBufferError

__all__ = ["Exported", "Span", "open_buffer", "outward"]


@dataclass(frozen=True)
class Span:
    """A buffer's bytes: ``length`` bytes from ``address``; ``kind`` names what it was."""

    address: int
    length: int
    kind: str


def _is_tensor(obj: object) -> bool:
    return all(callable(getattr(obj, name, None)) for name in ("data_ptr", "numel", "element_size"))


#: One past the last byte address: a range must end at or below it (mbind's end wraps past it).
_ADDRESS_END = 1 << 64


def _checked(address: int, length: int, kind: str, what: str) -> Span:
    """A span that is a possible memory range, else a ConfigError naming why not."""
    if length <= 0:
        raise ConfigError(f"zero-length buffer ({what}): nothing to place")
    if address < 0:
        raise ConfigError(f"{what} starts at a negative address ({address}): not a memory range")
    page = mmap.PAGESIZE
    end = -(-(address + length) // page) * page
    if end >= _ADDRESS_END:
        raise ConfigError(
            f"{what} is not a memory range: {length} bytes from {address:#x}, page-aligned, "
            f"reach {end:#x}, beyond the 64-bit address space (the kernel takes ranges that "
            f"end below {_ADDRESS_END:#x})"
        )
    return Span(address, length, kind)


def _extent(shape: Tuple[int, ...], strides: Tuple[int, ...], itemsize: int) -> Tuple[int, int]:
    """(first, end) byte offsets of every element from the element at index 0.

    Negative strides reach below the first element: a reversed view starts
    its memory at its last element.
    """
    first = sum(min(0, (d - 1) * s) for d, s in zip(shape, strides))
    last = sum(max(0, (d - 1) * s) for d, s in zip(shape, strides))
    return first, last + itemsize


def _ask(tensor: Any, name: str, kind: str) -> Any:
    try:
        return getattr(tensor, name)()
    except Exception as exc:  # a duck-typed object's own failure, named
        raise NotABufferError(f"{kind}.{name}() failed: {type(exc).__name__}: {exc}") from None


def _ints(values: Any, name: str, kind: str) -> Tuple[int, ...]:
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise NotABufferError(
            f"{kind}.{name}() returned {values!r:.60}, not integers: not a tensor bind_memory "
            "can address"
        ) from None


def _int(tensor: Any, name: str, kind: str) -> int:
    value = _ask(tensor, name, kind)
    try:
        return operator.index(value)
    except TypeError:
        raise NotABufferError(
            f"{kind}.{name}() returned {value!r:.60}, not an integer: not a tensor bind_memory "
            "can address"
        ) from None


def _tensor_span(tensor: Any) -> Span:
    kind = type(tensor).__name__
    device = getattr(getattr(tensor, "device", None), "type", "cpu")
    if device != "cpu" or getattr(tensor, "is_cuda", False) is True:
        raise NotABufferError(
            f"a {kind} on device {device!r}: its memory is the device's; bind_memory places "
            "host memory (a CPU tensor, pinned or not)"
        )
    count = _int(tensor, "numel", kind)
    if count <= 0:
        raise ConfigError(f"zero-length buffer (an empty {kind}): nothing to place")
    itemsize = _int(tensor, "element_size", kind)
    address = _int(tensor, "data_ptr", kind)
    if itemsize <= 0:
        raise NotABufferError(f"{kind}.element_size() is {itemsize}: not a tensor")
    first, end = 0, count * itemsize
    if callable(getattr(tensor, "size", None)) and callable(getattr(tensor, "stride", None)):
        dims = _ints(_ask(tensor, "size", kind), "size", kind)
        steps = _ints(_ask(tensor, "stride", kind), "stride", kind)
        if len(dims) != len(steps):
            raise NotABufferError(
                f"{kind}.size() has {len(dims)} dimensions and stride() {len(steps)}: "
                "its memory cannot be worked out"
            )
        if any(d <= 0 for d in dims):
            raise ConfigError(f"zero-length buffer (an empty {kind}): nothing to place")
        first, end = _extent(dims, tuple(s * itemsize for s in steps), itemsize)
    what = f"a {kind} of {count} elements of {itemsize} bytes at {address:#x}"
    return _checked(address + first, end - first, kind, what)


def _explicit_span(pair: Tuple[Any, ...]) -> Span:
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise NotABufferError(f"a tuple must be (address, length) of two ints, not {pair!r:.80}")
    address, length = pair
    what = f"(address, length) = ({address:#x}, {length})"
    if length < 0:
        raise ConfigError(f"{what} is not a memory range: a negative length")
    return _checked(address, length, "(address, length)", what)


def _strided_address(view: memoryview) -> int:
    """The address of element 0 of a buffer that is not C-contiguous (CPython's buffer API).

    cffi and ctypes read a buffer's address only through a C-contiguous
    request; a Fortran-ordered or reversed one is asked for with its strides.
    The view passed is held open by the caller, so the address stays valid.
    """
    import ctypes

    class PyBuffer(ctypes.Structure):
        _fields_ = [
            ("buf", ctypes.c_void_p),
            ("obj", ctypes.c_void_p),
            ("len", ctypes.c_ssize_t),
            ("itemsize", ctypes.c_ssize_t),
            ("readonly", ctypes.c_int),
            ("ndim", ctypes.c_int),
            ("format", ctypes.c_char_p),
            ("shape", ctypes.c_void_p),
            ("strides", ctypes.c_void_p),
            ("suboffsets", ctypes.c_void_p),
            ("internal", ctypes.c_void_p),
        ]

    api = ctypes.pythonapi
    get, release = api.PyObject_GetBuffer, api.PyBuffer_Release
    get.argtypes = [ctypes.py_object, ctypes.POINTER(PyBuffer), ctypes.c_int]
    get.restype = ctypes.c_int
    release.argtypes = [ctypes.POINTER(PyBuffer)]
    release.restype = None
    info = PyBuffer()
    pybuf_strides_writable = 0x0018 | 0x0001  # PyBUF_STRIDES | PyBUF_WRITABLE
    if get(view, ctypes.byref(info), pybuf_strides_writable) != 0:  # pragma: no cover
        raise BufferError("PyObject_GetBuffer failed")  # ctypes raises the set error first
    try:
        return int(info.buf or 0)
    finally:
        release(ctypes.byref(info))


class Exported:
    """A buffer object held exported (a memoryview open) while its pages are bound."""

    def __init__(self, buffer: object) -> None:
        self.view: Optional[memoryview] = None
        self.pointer: Any = None
        try:
            self.span = self._open(buffer)
        except BaseException:
            self.close()
            raise

    def _open(self, buffer: object) -> Span:
        kind = type(buffer).__name__
        try:
            view = memoryview(buffer)  # type: ignore[arg-type]
        except TypeError:
            raise NotABufferError(
                f"{kind} is not a buffer: give an object with a writable buffer (bytearray, "
                "mmap, numpy array, array.array, memoryview), a CPU tensor or (address, length)"
            ) from None
        except ValueError as exc:  # a closed mmap
            raise NotABufferError(f"{kind} cannot be read as a buffer: {exc}") from None
        self.view = view
        if view.readonly:
            raise ReadOnlyBufferError(
                f"{kind} is read-only: bind_memory places writable buffers (staging buffers, "
                "pools); a read-only buffer's pages are often shared (a file's page cache)"
            )
        if view.nbytes == 0:
            raise ConfigError(f"zero-length buffer (an empty {kind}): nothing to place")
        if view.c_contiguous:
            ffi = _libnuma._ffi()
            self.pointer = ffi.from_buffer(view, require_writable=True)
            return Span(int(ffi.cast("uintptr_t", self.pointer)), view.nbytes, kind)
        shape, strides = tuple(view.shape or ()), tuple(view.strides or ())
        first, end = _extent(shape, strides, view.itemsize)
        if end - first != view.nbytes:
            raise NotABufferError(
                f"{kind} is not contiguous (shape {shape}, strides {strides}: its "
                f"{view.nbytes} bytes are spread over {end - first}): give the array it is a "
                "view of, or (address, length)"
            )
        # Any dense layout (Fortran order, negative strides): its bytes are one range.
        try:
            address = _strided_address(view)
        except (AttributeError, BufferError, TypeError, ValueError) as exc:
            raise NotABufferError(
                f"{kind} is contiguous but not in C order, and its address cannot be read "
                f"here ({type(exc).__name__}: {exc}): give (address, length)"
            ) from None
        return _checked(address + first, view.nbytes, kind, f"a {kind}")

    def close(self) -> None:
        if self.pointer is not None:
            _libnuma._ffi().release(self.pointer)
            self.pointer = None
        if self.view is not None:
            self.view.release()
            self.view = None


def open_buffer(buffer: object) -> Tuple[Span, Optional[Exported]]:
    """``buffer``'s span, and the export to close when done (None: nothing held open)."""
    if isinstance(buffer, tuple):
        return _explicit_span(buffer), None
    if _is_tensor(buffer) and not isinstance(buffer, (memoryview, bytearray, mmap.mmap)):
        return _tensor_span(buffer), None
    exported = Exported(buffer)
    return exported.span, exported


def outward(span: Span) -> Tuple[int, int]:
    """The page-aligned range covering every byte of ``span`` ("Which pages" in the front)."""
    page = mmap.PAGESIZE
    start = span.address - span.address % page
    end = -(-(span.address + span.length) // page) * page
    return start, end - start
