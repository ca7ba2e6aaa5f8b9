"""Where this suite's temporary directories go (``tests/support/temproot.py``): RAM, if room."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..support import temproot

SHM = "tmpfs /dev/shm tmpfs rw,nosuid,nodev,relatime,size=24683772k 0 0\n"


@pytest.mark.parametrize(
    ("mounts", "wanted"),
    [
        (SHM, True),
        ("/dev/vda / ext4 rw 0 0\n" + SHM, True),
        # the last mount on a path is the one in effect
        (SHM + "/dev/vdb /dev/shm ext4 rw 0 0\n", False),
        ("/dev/vda / ext4 rw 0 0\n", False),
        (SHM.replace("rw,", "rw,noexec,"), False),
        ("", False),
    ],
)
def test_only_an_exec_allowed_tmpfs_is_taken(mounts: str, wanted: bool, tmp_path: Path) -> None:
    table = tmp_path / "mounts"
    table.write_text(mounts)
    # The real /dev/shm's room and access decide the rest; this machine's has both.
    if not wanted:
        assert temproot.ram_temproot(str(table)) is None
    elif temproot.ram_temproot() is not None:
        assert temproot.ram_temproot(str(table)) == "/dev/shm"


def test_an_unreadable_mount_table_keeps_pytests_choice(tmp_path: Path) -> None:
    assert temproot.ram_temproot(str(tmp_path / "absent")) is None


def test_too_little_room_keeps_pytests_choice(tmp_path: Path, monkeypatch) -> None:
    table = tmp_path / "mounts"
    table.write_text(SHM)
    monkeypatch.setattr(temproot, "RAM_TEMP_MIN_FREE", 1 << 62)
    assert temproot.ram_temproot(str(table)) is None


def test_this_session_uses_it_where_the_machine_allows(tmp_path: Path, pytestconfig) -> None:
    """The session's base is under /dev/shm exactly when ram_temproot allowed it at the start."""
    chose_ram = (
        temproot.ram_temproot() is not None
        and not pytestconfig.option.basetemp
        and not os.environ.get("PYTEST_DEBUG_TEMPROOT")
        and not os.environ.get("PYNUMABIND_IN_GUEST")
    )
    assert str(tmp_path.resolve()).startswith("/dev/shm/") == chose_ram
