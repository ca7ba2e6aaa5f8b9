"""Records for a fleet, through the command line: a directory of them, never lost, readable by all.

Everything here runs the real ``pynumabind`` command on this machine
(``advise --quick`` measures for about a second) against the real file
system: read-only and full file systems are real tmpfs mounts (as root; the
default place's read-only ``/var/lib`` is a tmpfs in a private mount
namespace, ``unshare``), and the worker that reads a record as another
account is a real process running as ``nobody``.  Each defect of the fleet
issue these tests cover failed on the code before the directory of records:

* a save that cannot be written measured first, then exited 2 with nothing
  on stdout (the measurement lost);
* as root under umask 077, a save created its directory mode 0700, and a
  worker under another account warned "no advice record" and bound blind;
* ``plan --topology OTHER.json --mode advised`` followed this host's record.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from pynumabind.discovery import load_topology
from pynumabind.records import store
from pynumabind.records._machine import machine_of, record_name

from ..support.childproc import run_in_child
from ..support.cli_helpers import SCRIPT, clean_env, two_node_snapshot
from ..support.cli_helpers import run as run_cli
from . import child_records

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mounts, other accounts: needs root")


def _progress(stderr: str) -> List[str]:
    return [line for line in stderr.splitlines() if line.startswith("pynumabind advise:")]


def _advise(
    *args: str, env: Optional[Dict[str, str]] = None, umask: int = -1
) -> subprocess.CompletedProcess[str]:
    """``pynumabind advise --quick --no-latency ARGS`` (about a second here)."""
    return subprocess.run(
        [SCRIPT, "advise", "--quick", "--no-latency", *args],
        capture_output=True, text=True, env=clean_env(env), timeout=180, umask=umask,
    )  # fmt: skip


# ------------------------------------------------- a directory, end to end


def test_a_directory_of_records_end_to_end(tmp_path: Path) -> None:
    """The issue's first checks: save into DIR, follow it, a foreign record changes nothing."""
    place = tmp_path / "records"
    place.mkdir()  # an existing directory: no trailing slash needed
    env = {"PYNUMABIND_ADVICE": str(place)}
    saved = _advise("--save", env=env)
    assert saved.returncode == 0, saved.stderr
    own = record_name(store.this_machine())
    assert os.listdir(place) == [own]
    assert f"saved the advice record to {place / own}" in saved.stderr

    def plan() -> subprocess.CompletedProcess[str]:
        done = run_cli("plan", "--mode", "advised", env=env)
        assert done.returncode == 0, done.stderr
        assert "WARNING" not in done.stderr and "Warnings" not in done.stdout, done.stderr
        assert (
            f"mode advised: not bound, on purpose: the advice record {place / own}" in done.stdout
        )
        return done

    alone = plan()
    foreign = store.save_record(
        child_records.advice(True), str(place), machine=child_records.other_machine()
    )
    assert plan().stdout == alone.stdout  # a foreign record in the same directory: nothing

    listed = run_cli("records", str(place))
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if ".json" in line]
    rows = {line[2:].split()[0]: line for line in lines if "follows" not in line}
    assert set(rows) == {own, os.path.basename(foreign)}
    assert rows[own].startswith("* ") and "followed by this machine" in rows[own]
    assert not rows[os.path.basename(foreign)].startswith("*")
    assert "another machine: the CPU was 'Other CPU 9000 (test)'" in rows[os.path.basename(foreign)]
    assert listed.stdout.rstrip().endswith(f"* this machine follows {place / own}")
    document = json.loads(run_cli("records", f"{place}/", "--json").stdout)
    assert document["follows"] == str(place / own)
    ((where,),) = [[p] for p in document["places"]]
    statuses = {r["file"]: r["status"] for r in where["records"]}
    assert statuses == {own: "followed", os.path.basename(foreign): "other machine"}


def test_records_marks_unreadable_files_and_escapes_what_files_say(tmp_path: Path) -> None:
    here = store.this_machine()
    store.save_record(child_records.advice(False), str(tmp_path))
    hostile = replace(child_records.other_machine(), cpu_model="\x1b[2J\nall 4 workers bound")
    store.save_record(child_records.advice(True), str(tmp_path), machine=hostile)
    (tmp_path / "notes.json").write_text('{"mine": 1}')
    (tmp_path / "broken.json").write_text("{")
    done = run_cli("records", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\\x1b[2J\\nall 4 workers bound" in done.stdout
    assert not any(line.startswith("all 4 workers") for line in done.stdout.splitlines())
    notes = next(line for line in done.stdout.splitlines() if "notes.json" in line)
    assert "cannot be read:" in notes and "is not an advice record" in notes
    assert "broken.json" in done.stdout and "is not valid JSON" in done.stdout
    assert f"this machine follows {tmp_path / record_name(here)}" in done.stdout


@pytest.mark.parametrize(
    "path, words",
    [
        ("{tmp}/missing", "does not exist"),
        ("{tmp}/notes.json", "is not an advice record"),
        ("{tmp}/notes.json/", "is not a directory of advice records"),
    ],
)
def test_records_of_a_bad_path_exits_2_in_one_line(tmp_path: Path, path: str, words: str) -> None:
    (tmp_path / "notes.json").write_text("{}")
    done = run_cli("records", path.format(tmp=tmp_path))
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("pynumabind: error: ") and words in line and "Traceback" not in line
    assert done.stdout == ""


def test_records_without_a_path_lists_the_rules_place(tmp_path: Path) -> None:
    store.save_record(child_records.advice(False), f"{tmp_path}/")
    done = run_cli("records", "--json", env={"PYNUMABIND_ADVICE": f"{tmp_path}/"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["places"][0]["path"] == f"{tmp_path}/"
    missing = run_cli("records", env={"PYNUMABIND_ADVICE": f"{tmp_path}/none/"})
    assert missing.returncode == 2 and "does not exist" in missing.stderr


# -------------------------------------------------------- never lost


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[callable]:  # type: ignore[valid-type]
    """Mount a real tmpfs with the options given; unmounted after the test."""
    mounted: List[Path] = []

    def mount(name: str, options: str) -> Path:
        if not ROOT or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root and mount(8)")
        point = tmp_path / name
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.mark.parametrize("where", ["records/", "advice.json"])
def test_a_read_only_place_is_refused_before_measuring(tmpfs, where: str) -> None:  # type: ignore[no-untyped-def]
    frozen = tmpfs("frozen", "ro,size=1m,mode=0755")
    done = _advise("--save", f"{frozen}/{where}")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()  # one line: no progress, nothing measured
    assert line.startswith(f"pynumabind: error: cannot write the advice record {frozen}/")
    assert "Read-only file system" in line and "Traceback" not in line
    assert done.stdout == ""


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_as_root_a_read_only_var_lib_is_refused_before_measuring() -> None:
    """The default place as root, ``/var/lib/pynumabind/``, on a read-only ``/var/lib``.

    A private mount namespace (``unshare -m``) puts a read-only tmpfs over
    ``/var/lib`` for the command only.
    """
    script = 'mount -t tmpfs -o ro,size=1m tmpfs /var/lib && exec "$0" advise --quick --save'
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, SCRIPT],
        capture_output=True, text=True, env=clean_env(), timeout=180, check=False,
    )  # fmt: skip
    if "mount:" in done.stderr or "unshare:" in done.stderr:
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("pynumabind: error: cannot write the advice record /var/lib/pynumabind/")
    assert "Read-only file system" in line and done.stdout == ""


@pytest.mark.parametrize("json_output", [False, True])
def test_a_save_that_fails_after_measuring_prints_the_report_first(
    tmpfs, json_output: bool
) -> None:  # type: ignore[no-untyped-def]
    """A tmpfs of one page, filled: the checks pass (no data), the record's write does not."""
    full = tmpfs("full", "size=4k,mode=0755")
    (full / "filler").write_bytes(b"x" * 4096)
    done = _advise("--save", f"{full}/records/", *(["--json"] if json_output else []))
    assert done.returncode == 1, done.stderr
    if json_output:
        assert json.loads(done.stdout)["recommendation"]["verdict"]
    else:
        assert "Recommendation:" in done.stdout
    assert _progress(done.stderr), done.stderr  # it measured
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"pynumabind: error: cannot write the advice record {full}/records/")
    assert "No space left on device" in last and "measured but not saved" in last
    assert [p.name for p in (full / "records").iterdir()] == []  # no temporary file left


def test_missing_directories_are_created_and_said(tmp_path: Path) -> None:
    place = tmp_path / "a" / "b"
    done = _advise("--save", f"{place}/")
    assert done.returncode == 0, done.stderr
    created = [line for line in done.stderr.splitlines() if "created the directory" in line]
    said = "pynumabind advise: created the directory {} (mode 0755) for the advice record"
    assert created == [said.format(tmp_path / "a"), said.format(place)]
    # Created before measuring: the lines come before the first measurement's progress.
    lines = done.stderr.splitlines()
    assert lines.index(created[-1]) < lines.index(
        next(p for p in _progress(done.stderr) if "memory" in p)
    )


# ---------------------------------------------- readable by every account


@needs_root
@pytest.mark.parametrize("where", ["fleet/advice.json", "fleet/records/"])
def test_saved_as_root_under_umask_077_a_worker_as_nobody_follows_it(where: str) -> None:
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="pynumabind-fleet-"))
    try:
        os.chmod(base, 0o755)  # the test's own directory; what the save creates is its own
        target = f"{base}/{where}"
        done = _advise("--save", target, umask=0o077)
        assert done.returncode == 0, done.stderr
        assert "WARNING" not in done.stderr, done.stderr
        fleet = base / "fleet"
        record = target if not target.endswith("/") else target + record_name(store.this_machine())
        made = [fleet] + ([Path(target)] if target.endswith("/") else [])
        for directory in made:
            assert stat.S_IMODE(directory.stat().st_mode) == 0o755, directory
        assert stat.S_IMODE(os.stat(record).st_mode) == 0o644
        found, _ = run_in_child(child_records.bind_as_nobody, target)
        nobody = found["nobody"]
        assert "error" not in nobody, nobody
        assert (nobody["uid"], nobody["gid"]) == (child_records.NOBODY, child_records.NOBODY)
        assert nobody["warnings"] == [], nobody["warnings"]
        assert nobody["not_bound"].startswith("mode advised: not bound, on purpose: ")
        assert record in nobody["not_bound"]
    finally:
        shutil.rmtree(base)


# ------------------------------------------------- another machine's plan


def test_planning_another_machine_never_follows_this_hosts_record(tmp_path: Path) -> None:
    snapshot = two_node_snapshot(tmp_path / "two.json")
    host = store.save_record(child_records.advice(False), str(tmp_path / "host.json"))
    done = run_cli("plan", "--topology", str(snapshot), "--mode", "advised", "--json",
                   env={"PYNUMABIND_ADVICE": host})  # fmt: skip
    assert done.returncode == 0, done.stderr
    ranks = json.loads(done.stdout)["ranks"]
    # The default mode's plan (node): each rank on its GPU's node, not left unbound.
    assert [(r["node"], r["cpus"], r["policy"]) for r in ranks] == [
        (0, "0", "preferred"),
        (1, "1", "preferred"),
    ]
    # Said once: the JSON document holds the warning, so stderr does not repeat it.
    warned = [w for r in ranks for w in r["warnings"] if "mode advised" in w]
    warned = list(dict.fromkeys(warned)) + [
        line for line in done.stderr.splitlines() if "WARNING" in line
    ]
    assert len(warned) == 1, (done.stdout, done.stderr)
    assert f"the advice record {host}" in warned[0]
    assert f"is not a record of the machine of snapshot {snapshot}" in warned[0]
    assert "NUMA node(s) 1 are new" in warned[0]


def test_planning_another_machine_follows_its_record_from_the_directory(tmp_path: Path) -> None:
    snapshot = two_node_snapshot(tmp_path / "two.json")
    place = tmp_path / "records"
    store.save_record(child_records.advice(True), f"{place}/")  # this host's
    topology = load_topology(str(snapshot))
    theirs = machine_of(topology, cpu_model="Snapshot CPU 1", kernel="6.1.0-test")
    theirs = replace(theirs, gpus=tuple(replace(g, model="PCI 10de:2330") for g in theirs.gpus))
    written = store.save_record(child_records.advice(False), f"{place}/", machine=theirs)
    done = run_cli("plan", "--topology", str(snapshot), "--mode", "advised", "--json",
                   env={"PYNUMABIND_ADVICE": str(place)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    ranks = json.loads(done.stdout)["ranks"]
    assert [(r["cpus"], r["policy"]) for r in ranks] == [(None, "none")] * 2
    reason = ranks[0]["reasons"][0]
    assert reason.startswith(f"mode advised: not bound, on purpose: the advice record {written}")
    assert "a snapshot holds no CPU model or kernel to compare" in reason
    # `records --topology` marks the record that machine follows, as plan found it.
    listed = run_cli("records", str(place), "--topology", str(snapshot))
    assert listed.returncode == 0, listed.stderr
    assert f"* the machine of snapshot {snapshot} follows {written}" in listed.stdout
    here = json.loads(run_cli("records", str(place), "--json").stdout)["follows"]
    assert here == str(place / record_name(store.this_machine()))


@needs_root
def test_a_record_closed_to_the_worker_is_named_not_called_missing() -> None:
    """A directory made by hand under umask 077: the one warning says why the worker cannot read."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="pynumabind-closed-"))
    try:
        os.chmod(base, 0o755)
        closed = base / "closed"
        closed.mkdir()
        os.chmod(closed, 0o700)
        store.save_record(child_records.advice(False), f"{closed}/")
        found, _ = run_in_child(child_records.bind_as_nobody, f"{closed}/")
        assert found["root"]["not_bound"] is not None  # root reads it
        (warning,) = found["nobody"]["warnings"]
        assert (
            f"cannot read the directory of advice records {closed}/: Permission denied" in warning
        )
        assert "no advice record" not in warning
        # A closed directory on the way to a record file: the same, not "no advice record".
        found, _ = run_in_child(child_records.bind_as_nobody, f"{closed}/inner/advice.json")
        (warning,) = found["nobody"]["warnings"]
        assert (
            f"cannot read the advice record {closed}/inner/advice.json: Permission denied"
            in warning
        )
    finally:
        shutil.rmtree(base)
