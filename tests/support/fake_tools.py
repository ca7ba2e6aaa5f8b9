"""Executables written for a test, on a ``PATH`` of its own: ``nvidia-smi`` where there is none.

No GPU and no NVIDIA driver here, so the tests that run ``nvidia-smi topo -m``
(``pynumabind._os.nvidia_smi``, and the report's cross-checks) run a small
shell script in its place.  The script first checks that it was called with
exactly ``topo -m`` (else exit 99), then runs its body: usually ``cat`` of a
real recorded output from :data:`OUTPUTS`.
"""

from __future__ import annotations

import stat
from pathlib import Path

#: Real ``nvidia-smi topo -m`` outputs (their sources: the README there).
OUTPUTS = Path(__file__).resolve().parents[1] / "machines" / "nvidia_smi"


def nvidia_smi(folder: Path, body: str) -> str:
    """Write ``folder/nvidia-smi`` running ``body``; return ``folder``, a ``PATH`` for it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text(
        '#!/bin/sh\n[ "$#" = 2 ] && [ "$1" = topo ] && [ "$2" = -m ] || exit 99\n' + body,
        encoding="utf-8",
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(folder)


def printing(folder: Path, text: str) -> str:
    """An ``nvidia-smi`` in ``folder`` that prints ``text`` (kept beside it) and exits 0."""
    folder.mkdir(parents=True, exist_ok=True)
    output = folder / "topo.txt"
    output.write_text(text, encoding="utf-8")
    return nvidia_smi(folder, f"cat '{output}'\n")


def recorded(name: str) -> str:
    """The recorded output ``tests/machines/nvidia_smi/NAME.txt``."""
    return (OUTPUTS / f"{name}.txt").read_text(encoding="utf-8")
