"""The CUDA runtime library, loaded with ctypes: the one place it is found (shell).

CUDA is never a dependency.  :func:`load_cudart` tries each name of
:data:`CUDART_NAMES` in order (the unversioned development link first, then
the runtimes of CUDA 13, 12 and 11) and returns the first library that
loads, or ``None`` and why none did (each loader error, once).  Whether the
library can *do* anything (a device, a driver) is the caller's question.
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Sequence, Tuple

__all__ = ["CUDART_NAMES", "load_cudart"]

CUDART_NAMES = ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0")


def load_cudart(names: Sequence[str] = CUDART_NAMES) -> Tuple[Optional[Any], str]:
    """(the library, the name that loaded), or (None, why none of ``names`` loads)."""
    errors: List[str] = []
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as exc:
            errors.append(str(exc).split(":")[-1].strip() or name)
    return None, f"the CUDA runtime library is not loadable ({'; '.join(dict.fromkeys(errors))})"
