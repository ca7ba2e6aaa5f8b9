"""The kernel's weighted-interleave weights (``pynumabind._os.weights``): read and written.

Read here from this machine's real sysfs (Linux 6.18: ``node0`` and the
``auto`` switch, which this kernel shows as ``__auto_type``) and from trees
written in a temporary folder, as the kernel lays them out; written only into
such trees (writing the real ones changes every process on the machine: the
QEMU guest does that, as root, and puts them back).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Dict, Optional

import pytest

from pynumabind._os import weights as _system
from pynumabind.errors import NumaSyscallError, TopologyError

REAL = Path("/sys/kernel/mm/mempolicy/weighted_interleave")


def tree(
    root: Path, weights: Dict[int, str], auto: Optional[str] = None, name: str = "auto"
) -> Path:
    folder = root.joinpath(*_system.WEIGHTS_DIR)
    folder.mkdir(parents=True)
    for node, text in weights.items():
        (folder / f"node{node}").write_text(text)
    if auto is not None:
        (folder / name).write_text(auto)
    return folder


@pytest.mark.skipif(not REAL.is_dir(), reason="needs Linux 6.9+ (weighted interleave)")
def test_this_machines_weights_read_as_the_files_say() -> None:
    found = _system.read_weights()
    assert found is not None and found.folder == str(REAL)
    expected = {int(p.name[4:]): int(p.read_text()) for p in REAL.iterdir() if p.name[4:].isdigit()}
    assert found.weights == expected and expected
    switch = [p for p in REAL.iterdir() if p.name in _system.AUTO_FILES]
    if switch:  # 6.16+: "true"/"false"
        assert found.auto is (switch[0].read_text().strip() == "true")
    else:
        assert found.auto is None


def test_weights_auto_and_its_other_name(tmp_path: Path) -> None:
    tree(tmp_path / "a", {0: "3\n", 2: "1\n"}, "false\n")
    found = _system.read_weights(str(tmp_path / "a"))
    assert found is not None
    assert dict(found.weights) == {0: 3, 2: 1} and found.auto is False
    assert found.for_nodes(frozenset({0, 1, 2})) == {0: 3, 1: 1, 2: 1}  # no file: the default 1
    assert found.described() == "the kernel's system-wide weights, set by hand (auto off)"
    tree(tmp_path / "b", {0: "1\n"}, "true\n", name="__auto_type")
    assert _system.read_weights(str(tmp_path / "b")).auto is True  # type: ignore[union-attr]
    tree(tmp_path / "c", {0: "1\n"})  # before 6.16
    old = _system.read_weights(str(tmp_path / "c"))
    assert old is not None and old.auto is None
    assert old.described() == "the kernel's system-wide weights"
    assert _system.read_weights(str(tmp_path / "none")) is None  # before 6.9


def test_a_malformed_file_is_a_topology_error_naming_it(tmp_path: Path) -> None:
    folder = tree(tmp_path, {0: "x\n"})
    with pytest.raises(TopologyError, match=f"malformed number 'x' in {folder}/node0"):
        _system.read_weights(str(tmp_path))
    (folder / "node0").write_text("1\n")
    (folder / "auto").write_text("maybe\n")
    with pytest.raises(TopologyError, match="expected true or false"):
        _system.read_weights(str(tmp_path))


def test_writing_returns_the_weights_before(tmp_path: Path) -> None:
    folder = tree(tmp_path, {0: "1\n", 1: "1\n", 2: "1\n"}, "true\n")
    before = _system.write_weights({0: 3, 2: 1}, str(tmp_path))
    assert dict(before.weights) == {0: 1, 1: 1, 2: 1} and before.auto is True
    assert [(folder / f"node{n}").read_text() for n in (0, 1, 2)] == ["3\n", "1\n", "1\n"]


def test_a_failed_write_puts_back_what_it_wrote(tmp_path: Path) -> None:
    folder = tree(tmp_path, {0: "1\n", 2: "4\n"}, "true\n")
    with pytest.raises(NumaSyscallError) as caught:
        _system.write_weights({0: 3, 2: 2, 5: 1}, str(tmp_path))  # node 5: no such file
    assert caught.value.errno == errno.ENOENT
    assert str(caught.value.strerror).startswith(
        f"writing {folder}/node5 with nodes 5 failed: ENOENT"
    )
    assert (folder / "node0").read_text() == "1\n" and (folder / "node2").read_text() == "4\n"
    with pytest.raises(NumaSyscallError, match=r"Linux < 6\.9"):
        _system.write_weights({0: 1}, str(tmp_path / "none"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file")
def test_a_write_refused_is_the_errno(tmp_path: Path) -> None:
    folder = tree(tmp_path, {0: "1\n"})
    (folder / "node0").chmod(0o444)
    with pytest.raises(NumaSyscallError) as caught:
        _system.write_weights({0: 3}, str(tmp_path))
    assert caught.value.errno == errno.EACCES
