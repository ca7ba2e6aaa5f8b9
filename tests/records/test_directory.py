"""A directory of advice records, one per machine type: names, saving, choosing, racing.

The machine type and its file name are pure (:mod:`pynumabind.records._machine`),
tested as values and as properties over generated machines; the directory
goes through the real file system, and the racing writers and readers are
real processes (``child_records``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynumabind.errors import AdviceRecordError
from pynumabind.model import Topology
from pynumabind.options import Options
from pynumabind.records import _directory, store
from pynumabind.records._json import record_dict
from pynumabind.records._machine import (
    MEMORY_CLASSES_PER_DOUBLING,
    MEMORY_TOLERANCE,
    Machine,
    machine_of,
    machine_type,
    memory_class,
    record_name,
    snapshot_machine,
    staleness,
)

from ..support.childproc import child_command
from ..support.topology_builders import dgx_h100, gpu, make_topology, topologies
from . import child_records

GiB = 1 << 30


def two_socket() -> Topology:
    return make_topology(
        {0: "0-7", 1: "8-15"},
        distance=lambda a, b: 10 if a == b else 21,
        gpus=[
            gpu(0, 0, bus="0000:17:00.0", model="PCI 10de:2335"),
            gpu(1, 1, bus="0000:b1:00.0", model="PCI 10de:2335"),
        ],
    )


def machine_for(topology: Topology, size: int = 256 * GiB, **changes: object) -> Machine:
    sizes = {n: size if topology.nodes[n].cpus else None for n in topology.nodes}
    found = machine_of(topology, cpu_model="Test CPU 9000", kernel="6.8.0", memory_bytes=sizes)
    return replace(found, **changes)  # type: ignore[arg-type]


def write(path: Path, machine: Machine, *, bind: bool = False, saved: str = "2026-12-03T10:00:00Z"):  # type: ignore[no-untyped-def]
    document = record_dict(child_records.advice(bind), machine, saved, "test")
    path.write_text(json.dumps(document))
    return path


# ------------------------------------------------------- the machine type


def test_memory_classes_are_narrower_than_the_tolerance() -> None:
    assert MEMORY_CLASSES_PER_DOUBLING == 36
    assert 2 ** (1 / MEMORY_CLASSES_PER_DOUBLING) - 1 < MEMORY_TOLERANCE
    assert 2 ** (1 / (MEMORY_CLASSES_PER_DOUBLING - 1)) - 1 > MEMORY_TOLERANCE  # the fewest
    for k in (0, 1, 30, 40, 50):  # exact at every power of two: integer arithmetic
        assert memory_class(1 << k) == 36 * k
    for k in (30, 40, 50):  # a byte below a power of two: the class below it
        assert memory_class((1 << k) - 1) == 36 * k - 1
    assert memory_class(None) is None and memory_class(0) == 0


@given(st.integers(1, 1 << 52), st.integers(1, 1 << 52))
def test_one_memory_class_is_never_a_difference(a: int, b: int) -> None:
    same = memory_class(a) == memory_class(b)
    differs = abs(a - b) > MEMORY_TOLERANCE * max(a, b)
    assert not (same and differs)


_CHANGES: Dict[str, Callable[[Machine, float], Machine]] = {
    "memory": lambda m, f: replace(
        m,
        nodes=tuple(
            replace(n, memory_bytes=None if n.memory_bytes is None else int(n.memory_bytes * f))
            for n in m.nodes
        ),
    ),
    "kernel": lambda m, f: replace(m, kernel=f"{m.kernel}.{int(f * 100)}"),
    "cpu": lambda m, f: replace(m, cpu_model="Another CPU"),
    "gpu removed": lambda m, f: replace(m, gpus=m.gpus[1:]),
    "gpu model": lambda m, f: replace(
        m, gpus=tuple(replace(g, model="PCI 1002:74a1") for g in m.gpus)
    ),
    "node cpus": lambda m, f: replace(
        m, nodes=(replace(m.nodes[0], cpus=m.nodes[0].cpus | {4096}), *m.nodes[1:])
    ),
}


@settings(max_examples=150, deadline=None)
@given(
    topologies(max_nodes=4, max_gpus=4),
    st.integers(1 << 30, 1 << 42),
    st.sampled_from(sorted(_CHANGES)),
    st.floats(0.9, 1.1),
)
def test_one_name_one_type_never_stale_to_each_other(
    topology: Topology, size: int, change: str, factor: float
) -> None:
    """A record's file name is shared only by machines that are not stale to each other."""
    sizes = {n: size + 4096 * n for n in topology.nodes}
    first = machine_of(topology, cpu_model="Test CPU", kernel="6.8.0", memory_bytes=sizes)
    second = _CHANGES[change](first, factor)
    if record_name(first) == record_name(second):
        assert machine_type(first) == machine_type(second)
        assert staleness(first, second) == [] and staleness(second, first) == []
    if staleness(first, second):
        assert record_name(first) != record_name(second)


def test_machines_of_one_type_share_a_name_across_reserved_pages() -> None:
    recorded = machine_for(two_socket(), size=256 * GiB)
    # Class boundaries sit at 2**(k/36): 256 GiB is one, so go up from it.
    booted_again = machine_for(two_socket(), size=256 * GiB + 300 * (1 << 20))
    assert record_name(recorded) == record_name(booted_again)
    assert staleness(recorded, booted_again) == []
    dimm_out = machine_for(two_socket(), size=224 * GiB)
    assert record_name(recorded) != record_name(dimm_out)


def test_the_name_is_readable_and_safe() -> None:
    topology = dgx_h100()
    here = machine_of(
        topology, cpu_model="Intel(R) Xeon(R) Platinum 8480C", kernel="6.8.0-40-generic"
    )
    name = record_name(here)
    assert re.fullmatch(r"intel-xeon-platinum-8480c-2n-8gpu-[0-9a-f]{16}\.json", name), name
    assert record_name(replace(here, kernel="6.8.0-41-generic")) != name
    unknown = record_name(replace(here, cpu_model=None))
    assert unknown.startswith("unknown-cpu-2n-8gpu-")
    hostile = record_name(replace(here, cpu_model="../../\x1b[2J\nEvil  CPU @ 9 GHz"))
    assert re.fullmatch(r"[a-z0-9-]+\.json", hostile) and not hostile.startswith("."), hostile
    assert hostile.startswith("2j-evil-2n-8gpu-")


def test_a_snapshot_machine_holds_only_what_a_snapshot_knows() -> None:
    topology = two_socket()
    nvml = topology.replace(
        gpus=tuple(replace(g, model="NVIDIA H100 80GB HBM3") for g in topology.gpus)
    )
    seen = snapshot_machine(nvml)
    assert seen.cpu_model is None and seen.kernel is None
    assert [g.model for g in seen.gpus] == [None, None]  # NVML's names: not the record's form
    assert [g.model for g in snapshot_machine(topology).gpus] == ["PCI 10de:2335"] * 2
    # A record saved on that machine (CPU model, kernel, sysfs GPU names) matches it...
    recorded = machine_of(topology, cpu_model="Test CPU 9000", kernel="6.8.0")
    assert staleness(recorded, seen) == []
    # ...and a record of another machine does not.
    other = machine_of(make_topology({0: "0-15"}), cpu_model="Test CPU 9000", kernel="6.8.0")
    assert staleness(other, seen)


# ------------------------------------------------------------ the path rule


def test_a_path_names_a_directory_by_a_trailing_slash_or_an_existing_one(tmp_path: Path) -> None:
    existing = tmp_path / "records"
    existing.mkdir()
    (tmp_path / "link").symlink_to(existing)
    (tmp_path / "file.json").write_text("{}")
    assert store.names_directory(str(existing)) and store.names_directory(f"{existing}/")
    assert store.names_directory(str(tmp_path / "link"))
    assert store.names_directory(str(tmp_path / "missing") + "/")
    assert not store.names_directory(str(tmp_path / "missing"))  # a file, whatever its name
    assert not store.names_directory(str(tmp_path / "missing.json"))
    assert not store.names_directory(str(tmp_path / "file.json"))


# ------------------------------------------------------------------ saving


@pytest.fixture
def umask_077() -> Iterator[None]:
    """A hardened host's umask, for this process while the test runs."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def test_save_into_a_directory_names_the_file_by_machine_type(tmp_path: Path, umask_077) -> None:  # type: ignore[no-untyped-def]
    place = tmp_path / "fleet" / "records"
    recorded = machine_for(two_socket())
    target = store.prepare_save(f"{place}/", machine=recorded)
    assert target.file == str(place / record_name(recorded)) and target.in_directory
    assert target.created == (str(tmp_path / "fleet"), str(place))
    for made in target.created:  # 0755 whatever the umask
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o755
    assert os.listdir(place) == []  # the write test left nothing
    written = store.save_record(child_records.advice(True), f"{place}/", machine=recorded)
    assert written == target.file
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o644
    # Again, the same type: the same file, replaced (a stale record of this type included).
    inode = os.stat(written).st_ino
    again = store.save_record(child_records.advice(False), str(place), machine=recorded)
    assert again == written and os.stat(again).st_ino != inode
    # Another type: a second file beside it, the first untouched.
    other = store.save_record(
        child_records.advice(True), str(place), machine=child_records.other_machine()
    )
    assert sorted(os.listdir(place)) == sorted([os.path.basename(written), os.path.basename(other)])
    assert not store.load_record(written).advice.bind


def test_others_cannot_read_names_the_directory_a_umask_closed(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    os.chmod(closed, 0o700)
    target = store.prepare_save(f"{closed}/", machine=machine_for(two_socket()))
    why = store.others_cannot_read(target)
    assert why is not None and f"{closed} is mode 0700" in why and "chmod o+rx" in why
    os.chmod(closed, 0o711)  # others may traverse, not list: a directory of records is listed
    assert f"{closed} is mode 0711" in (store.others_cannot_read(target) or "")


# ----------------------------------------------------------------- reading


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def logged() -> Iterator[Callable[[], List[str]]]:
    """The WARNING messages of the store, whatever other tests did to the loggers above."""
    logger = logging.getLogger(store.__name__)
    handler, level = _Messages(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    store._WARNED.clear()
    yield lambda: list(handler.messages)
    logger.removeHandler(handler)
    logger.setLevel(level)


def _resolve(place: str, here: Machine) -> store.Advised:
    return store.resolve_advised(
        Options(mode="advised", rank=0), two_socket(), {"PYNUMABIND_ADVICE": place}, machine=here
    )


def test_a_worker_follows_its_types_record_and_ignores_the_others_silently(
    tmp_path: Path, logged: Callable[[], List[str]]
) -> None:
    here = machine_for(two_socket())
    own = write(tmp_path / record_name(here), here, bind=False)
    write(tmp_path / "other.json", child_records.other_machine(), bind=True)
    (tmp_path / "notes.json").write_text('{"not": "a record"}')
    (tmp_path / ".advice-123.tmp").write_text("half a rec")
    advised = _resolve(str(tmp_path), here)
    assert advised.fallback is None and advised.not_bound is not None
    assert str(own) in advised.not_bound
    assert logged() == []


def test_none_of_this_type_is_one_warning_naming_the_directory_and_the_closest(
    tmp_path: Path, logged: Callable[[], List[str]]
) -> None:
    here = machine_for(two_socket())
    write(tmp_path / "far.json", child_records.other_machine())
    near = write(tmp_path / "near.json", replace(here, kernel="6.9.1"))
    (tmp_path / "broken.json").write_text("{")
    first = _resolve(f"{tmp_path}/", here)
    second = _resolve(f"{tmp_path}/", here)
    assert first.fallback is not None and first.options.mode is None
    assert second.fallback == first.fallback
    (warning,) = logged()
    assert f"no advice record for this machine in {tmp_path}/" in warning
    assert "it holds 2 records and 1 file that cannot be read as one" in warning
    assert f"the closest, {near.name}" in warning
    assert "the kernel was 6.9.1, now 6.8.0" in warning
    assert "pynumabind advise --save" in warning


def test_an_empty_or_missing_directory(tmp_path: Path) -> None:
    here = machine_for(two_socket())
    record, problem = store._search([f"{tmp_path}/"], here)
    assert record is None and problem == f"no advice record in {tmp_path}/ (it holds 0 records)"
    record, problem = store._search([f"{tmp_path}/none/"], here)
    assert record is None and problem == f"no advice record ({tmp_path}/none/)"


def test_a_record_under_another_name_is_one_record_of_the_directory(tmp_path: Path) -> None:
    here = machine_for(two_socket())
    legacy = write(tmp_path / "advice.json", here, saved="2026-01-01T00:00:00Z")
    record, _ = store._search([str(tmp_path)], here)
    assert record is not None and record.path == str(legacy)
    # Two of this type: its own name first, even when the other is newer...
    own = write(tmp_path / record_name(here), here, saved="2025-01-01T00:00:00Z")
    write(tmp_path / "advice.json", here, saved="2027-01-01T00:00:00Z")
    record, _ = store._search([str(tmp_path)], here)
    assert record is not None and record.path == str(own)
    # ...else the newest saved.
    own.unlink()
    write(tmp_path / "b.json", here, saved="2027-06-01T00:00:00Z")
    record, _ = store._search([str(tmp_path)], here)
    assert record is not None and record.path == str(tmp_path / "b.json")


def test_the_fast_path_reads_one_file(tmp_path: Path) -> None:
    here = machine_for(two_socket())
    own = write(tmp_path / record_name(here), here)
    for i in range(5):
        write(tmp_path / f"other-{i}.json", child_records.other_machine())
    listing = _directory.find_in_directory(str(tmp_path), here)
    assert not listing.complete and [e.path for e in listing.entries] == [str(own)]
    full = _directory.list_directory(str(tmp_path), here)
    assert full.complete and len(full.entries) == 6 and full.followed is not None
    assert full.followed.path == str(own)


def test_reading_a_directory_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_directory, "MAX_DIRECTORY_RECORDS", 3)
    here = machine_for(two_socket())
    for i in range(5):
        write(tmp_path / f"other-{i}.json", child_records.other_machine())
    write(tmp_path / "zzz-mine.json", here)  # beyond the bound, by name
    listing = _directory.list_directory(str(tmp_path), here)
    assert [e.name for e in listing.entries] == ["other-0.json", "other-1.json", "other-2.json"]
    assert listing.not_read == 3 and not listing.complete and listing.followed is None
    assert "3 records; 3 more not read" in listing.problem()


def test_the_per_user_directory_first_then_the_system_one(tmp_path: Path) -> None:
    here = machine_for(two_socket())
    user, system = tmp_path / "user", tmp_path / "system"
    user.mkdir()
    system.mkdir()
    write(user / "other.json", child_records.other_machine())
    mine = write(system / record_name(here), here)
    places = [f"{user}/", f"{system}/"]
    record, _ = store._search(places, here)
    assert record is not None and record.path == str(mine)  # past the user's other machine
    users = write(user / record_name(here), here, bind=True)
    record, _ = store._search(places, here)
    assert record is not None and record.path == str(users)
    listings = store.list_records(f"{user}/", machine=here)
    assert listings[0].followed is not None and listings[0].followed.path == str(users)


def test_load_record_and_load_advice_with_a_directory(tmp_path: Path) -> None:
    here = store.this_machine()
    mine = store.save_record(child_records.advice(True), str(tmp_path))
    store.save_record(
        child_records.advice(False), str(tmp_path), machine=child_records.other_machine()
    )
    assert store.load_record(str(tmp_path)).path == mine
    assert store.load_advice(str(tmp_path)).bind is True
    assert store.load_advice(environ={"PYNUMABIND_ADVICE": f"{tmp_path}/"}).bind is True
    with pytest.raises(AdviceRecordError, match="name the record's file"):
        store.load_advice(str(tmp_path), check_machine=False)
    os.unlink(mine)
    with pytest.raises(AdviceRecordError, match=f"no advice record for this machine in {tmp_path}"):
        store.load_record(str(tmp_path), machine=here)


def test_list_records_says_what_a_place_holds(tmp_path: Path) -> None:
    here = machine_for(two_socket())
    write(tmp_path / record_name(here), here)
    write(tmp_path / "other.json", child_records.other_machine())
    (tmp_path / "notes.json").write_text("[]")
    (listing,) = store.list_records(str(tmp_path), machine=here)
    assert listing.directory and [e.name for e in listing.entries] == sorted(
        [record_name(here), "other.json", "notes.json"]
    )
    kinds = {
        e.name: (e.matches, e.record is not None, e.problem is not None) for e in listing.entries
    }
    assert kinds == {
        record_name(here): (True, True, False),
        "other.json": (False, True, False),
        "notes.json": (False, False, True),
    }
    with pytest.raises(AdviceRecordError, match="does not exist"):
        store.list_records(str(tmp_path / "missing"), machine=here)
    with pytest.raises(AdviceRecordError, match="is not an advice record"):
        store.list_records(str(tmp_path / "notes.json"), machine=here)
    with pytest.raises(AdviceRecordError, match="invalid advice record path"):
        store.list_records("", machine=here)


# ------------------------------------------------------- racing, for real


def _start(
    func: Callable[..., object], *args: object, umask: Optional[int] = None
) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.Popen(
        child_command(func, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, umask=-1 if umask is None else umask,
    )  # fmt: skip


def _result(proc: subprocess.Popen[str]) -> object:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_directory_a_racing_writer_makes_between_two_looks_is_taken_as_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the test below once lost, made certain: between the save's ``isdir`` (no
    directory yet) and its ``lexists`` (something there), another writer made the directory.

    That writer's directory is used, not refused as "not a directory".
    """
    place = tmp_path / "shared" / "records"
    real_isdir = os.path.isdir
    looks: List[str] = []

    def isdir_before_the_racer(path: str) -> bool:
        if path == str(place) and not looks:
            looks.append(path)
            assert not real_isdir(path)
            os.makedirs(path)  # the racing writer, right after this look
            return False
        return real_isdir(path)

    monkeypatch.setattr(os.path, "isdir", isdir_before_the_racer)
    target = store.prepare_save(f"{place}/")
    assert looks == [str(place)]
    assert target.directory == str(place) and target.created == ()


def test_racing_writers_of_two_types_leave_two_whole_records_and_no_temporary_file(
    tmp_path: Path,
) -> None:
    """Six writers at once into a directory none has made yet, under umask 077; a reader reads on.

    Three save this machine's record, three another type's, 25 times each;
    the directory is created by whichever wins.  Then: exactly one file per
    type, each a whole record of its machine, 0644 in a 0755 directory, and
    no temporary file; the reader never saw half a record.
    """
    place = f"{tmp_path}/shared/records/"
    writers = [
        _start(child_records.save_repeatedly, place, kind, 25, umask=0o077)
        for kind in ("here", "other", "here", "other", "here", "other")
    ]
    reader = _start(child_records.read_repeatedly, place, 300)
    names = {name for proc in writers for name in _result(proc)}  # type: ignore[union-attr]
    read = _result(reader)
    here = store.this_machine()
    expected = {place + record_name(here), place + record_name(child_records.other_machine())}
    assert names == expected
    assert sorted(os.listdir(place)) == sorted(os.path.basename(n) for n in expected)
    for made in (f"{tmp_path}/shared", place):
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o755, made
    for name in expected:
        assert stat.S_IMODE(os.stat(name).st_mode) == 0o644
        record = store.load_record(name)
        kind = "here" if record.machine == here else "other"
        assert record.advice.recommendation.reasons[0].startswith(kind)
    assert read["problems"] == [] and read["found"] + read["missing"] == 300, read  # type: ignore[index]


def test_racing_writers_of_one_file_leave_one_whole_record(tmp_path: Path) -> None:
    place = str(tmp_path / "advice.json")
    writers = [_start(child_records.save_repeatedly, place, "here", 25) for _ in range(4)]
    for proc in writers:
        assert _result(proc) == [place]
    assert os.listdir(tmp_path) == ["advice.json"]
    assert store.load_record(place).machine == store.this_machine()
