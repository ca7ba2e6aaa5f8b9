"""Record the NUMA-relevant part of a guest's ``/sys`` and keep it as a fixture tree.

A guest-side test (``guest/test_guest_boot.py``) calls :func:`record` and prints the result on
one tagged line (``RECORD_TAG``); the host test of that session (``test_guest_suite.py``)
compares it with the tree committed under ``tests/machines/sysfs/<name>/`` or, with
``PYNUMABIND_VM_RECORD_SYSFS=1``, writes it there (:func:`write_fixture`).  Unit tests of
discovery (memory tiers, HMAT access attributes, weighted-interleave weights) read that tree as
the kernel wrote it.

The fixture holds regular files only, at their paths relative to ``/sys``.  The kernel's
symbolic links that matter (``nodeN/access0/initiators/nodeM -> ../../../nodeM``) are listed in
its ``SYMLINKS`` file instead (a link to a parent directory makes a cycle for tools that follow
links, e.g. setuptools' sdist walk); :func:`materialize` copies the tree and makes them.

Only the standard library is used: this module runs in the guest and on the host.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Dict, List

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "machines" / "sysfs"
"""``tests/machines/sysfs``: one recorded tree per guest (``qemu-6.1-standard``, ...)."""

RECORD_TAG = "PYNUMABIND-SYSFS-RECORD "
"""Prefix of the line carrying a record (JSON) on the guest's output."""

RECORD_ENV = "PYNUMABIND_VM_RECORD_SYSFS"
"""Set to ``1`` on the host to (re)write the committed fixtures from the guests instead of
comparing them."""

SYMLINKS_FILE = "SYMLINKS"
README_FILE = "README.md"

FILE_PATTERNS = (
    # node states, and per node: CPUs, SLIT row, memory, HMAT access attributes
    "devices/system/node/online",
    "devices/system/node/possible",
    "devices/system/node/has_cpu",
    "devices/system/node/has_memory",
    "devices/system/node/has_normal_memory",
    "devices/system/node/node*/cpulist",
    "devices/system/node/node*/cpumap",
    "devices/system/node/node*/distance",
    "devices/system/node/node*/meminfo",
    "devices/system/node/node*/access*/initiators/*_bandwidth",
    "devices/system/node/node*/access*/initiators/*_latency",
    # CPUs: what topology_from_sysfs reads
    "devices/system/cpu/online",
    "devices/system/cpu/possible",
    "devices/system/cpu/present",
    "devices/system/cpu/cpu*/topology/*",
    "devices/system/cpu/cpu*/cache/index*/id",
    "devices/system/cpu/cpu*/cache/index*/level",
    "devices/system/cpu/cpu*/cache/index*/type",
    "devices/system/cpu/cpu*/cache/index*/shared_cpu_list",
    # memory tiers (6.1+), weighted-interleave weights (6.9+)
    "devices/virtual/memory_tiering/memory_tier*/nodelist",
    "kernel/mm/mempolicy/*",
    "kernel/mm/mempolicy/*/*",
)
"""Files recorded, relative to ``/sys`` (``glob`` patterns; what does not exist is left out)."""

LINK_PATTERNS = ("devices/system/node/node*/access*/initiators/node*",)
"""Symbolic links recorded (as ``path -> target`` lines of ``SYMLINKS``)."""

VOLATILE = ("/meminfo",)
"""Files whose content changes from run to run (free memory): compared by MemTotal only."""


def record(root: str = "/sys") -> Dict[str, Any]:
    """``{"files": {relpath: text}, "symlinks": {relpath: target}}`` of ``root`` (a sysfs)."""
    files: Dict[str, str] = {}
    links: Dict[str, str] = {}
    for pattern in FILE_PATTERNS:
        for path in glob.glob(os.path.join(root, pattern)):
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError:
                continue  # write-only or unreadable attribute
            files[os.path.relpath(path, root)] = text
    for pattern in LINK_PATTERNS:
        for path in glob.glob(os.path.join(root, pattern)):
            if os.path.islink(path):
                links[os.path.relpath(path, root)] = os.readlink(path)
    return {"files": dict(sorted(files.items())), "symlinks": dict(sorted(links.items()))}


def record_line(data: Mapping[str, Any]) -> str:
    """A record (:func:`record`) on one line, tagged for :func:`parse_record_lines`."""
    return RECORD_TAG + json.dumps(data, sort_keys=True)


def parse_record_lines(output: str) -> List[Dict[str, Any]]:
    """Every record printed on ``output`` (a guest's console), in order."""
    return [
        json.loads(line[len(RECORD_TAG) :])
        for line in output.splitlines()
        if line.startswith(RECORD_TAG)
    ]


def load_fixture(path: Path) -> Dict[str, Any]:
    """A committed fixture read back in :func:`record`'s form."""
    files: Dict[str, str] = {}
    for file in sorted(path.rglob("*")):
        rel = file.relative_to(path).as_posix()
        if file.is_file() and rel not in (SYMLINKS_FILE, README_FILE):
            files[rel] = file.read_text(encoding="utf-8")
    links: Dict[str, str] = {}
    listing = path / SYMLINKS_FILE
    if listing.is_file():
        for line in listing.read_text(encoding="utf-8").splitlines():
            if line.strip():
                name, target = line.split(" -> ", 1)
                links[name] = target
    return {"files": files, "symlinks": links}


def write_fixture(data: Mapping[str, Any], path: Path, readme: str) -> None:
    """Replace the fixture at ``path`` with ``data`` (a record) and its ``README.md``."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    for rel, text in data["files"].items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    lines = [f"{name} -> {target}\n" for name, target in data["symlinks"].items()]
    (path / SYMLINKS_FILE).write_text("".join(lines), encoding="utf-8")
    (path / README_FILE).write_text(readme, encoding="utf-8")


def materialize(path: Path, dest: Path) -> Path:
    """Copy the fixture at ``path`` into ``dest`` as a sysfs root, its symbolic links made."""
    data = load_fixture(path)
    for rel, text in data["files"].items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    for rel, link in data["symlinks"].items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(link)
    return dest


NODE_SLACK_KB = 64 << 10
"""How far one node's ``MemTotal`` may move between boots of the same guest (kB)."""


def mem_total_kb(meminfo: str) -> int:
    """``MemTotal`` of a node's ``meminfo`` text, in kB."""
    for line in meminfo.splitlines():
        if "MemTotal:" in line:
            return int(line.split()[-2])
    raise ValueError(f"no MemTotal in {meminfo!r}")


def differences(expected: Mapping[str, Any], live: Mapping[str, Any]) -> List[str]:
    """How ``live`` differs from ``expected`` (empty: the same).

    Every file must match exactly, except ``meminfo``: there only ``MemTotal`` counts, within
    ``NODE_SLACK_KB`` per node and 1% summed over the nodes.  The kernel image and what it
    reserves with it (~45 MB in these guests) land on any node from one boot to the next (its
    physical load address is randomized, KASLR: measured on node 1 in one boot and node 2 in
    the next), so a node's total moves while the machine's does not.
    """
    out: List[str] = []
    want, got = expected["files"], live["files"]
    for rel in sorted(set(want) - set(got)):
        out.append(f"{rel}: recorded, missing now")
    for rel in sorted(set(got) - set(want)):
        out.append(f"{rel}: present now, not recorded")
    totals = [0, 0]
    for rel in sorted(set(want) & set(got)):
        if rel.endswith(VOLATILE):
            before, now = mem_total_kb(want[rel]), mem_total_kb(got[rel])
            totals = [totals[0] + before, totals[1] + now]
            if abs(before - now) > NODE_SLACK_KB:
                out.append(f"{rel}: MemTotal {now} kB, recorded {before} kB")
        elif want[rel] != got[rel]:
            out.append(f"{rel}: {got[rel]!r}, recorded {want[rel]!r}")
    if abs(totals[0] - totals[1]) > totals[0] // 100:
        out.append(f"MemTotal of all nodes {totals[1]} kB, recorded {totals[0]} kB")
    if expected["symlinks"] != live["symlinks"]:
        out.append(f"symlinks: {live['symlinks']}, recorded {expected['symlinks']}")
    return out
