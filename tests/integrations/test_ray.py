"""A Ray actor binding itself to the GPU Ray gave it, with the real Ray from PyPI.

Real here: Ray's scheduler, its actors (separate worker processes), and the
``CUDA_VISIBLE_DEVICES`` Ray sets for an actor with ``num_gpus=1`` -- Ray
does that from ``ray.init(num_gpus=2)`` even with no GPU present, and sets no
``LOCAL_RANK``/``RANK``.  Each actor runs the Ray recipe of
docs/site/ray.md: ``bind_current_process()`` with no rank, so the
visible-GPU rule applies,
and the test reads each actor's binding from outside through /proc.  What
would need a GPU: nothing up to this point; Ray's GPUs are logical here and
the machine is a two-node snapshot over this machine's CPUs 0 and 1
(``PYNUMABIND_TOPOLOGY``), the one stand-in.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from ..support.recipes import observe, recipe
from .helpers import require, require_two_cpus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
require("ray", "vllm")


@pytest.fixture
def ray_cluster(snapshot: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    require_two_cpus()
    import ray

    # Ray writes /tmp/ray and ~/.ray (an auth token) by default: keep it all in
    # a short temporary directory (its socket paths must fit in 107 bytes),
    # removed afterwards, and turn the token off.
    temp = Path(tempfile.mkdtemp(prefix="pnb-ray-"))
    monkeypatch.setenv("RAY_TMPDIR", str(temp))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=2,
        num_gpus=2,
        include_dashboard=False,
        object_store_memory=80 * 1024 * 1024,
        _temp_dir=str(temp),
        runtime_env={"env_vars": {"PYNUMABIND_TOPOLOGY": str(snapshot)}},
        log_to_driver=False,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def test_two_actors_each_bind_to_their_gpus_node(ray_cluster) -> None:
    ray = ray_cluster
    namespace: dict = {"__name__": "pynumabind_ray_recipe"}  # not importable: shipped by value
    exec(compile(recipe("ray"), "docs/site/ray.md:ray", "exec"), namespace)
    trainers = [namespace["Trainer"].remote() for _ in range(2)]

    def report(self) -> dict:  # runs inside the actor, after the recipe's __init__
        return {
            "pid": os.getpid(),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "launcher_rank": [v for v in ("LOCAL_RANK", "RANK") if v in os.environ],
            "summary": self.binding.summary(),
            "reasons": list(self.binding.plan.reasons),
        }

    reports = ray.get([t.__ray_call__.remote(report) for t in trainers], timeout=300)
    seen = [observe(r["pid"]) for r in reports]  # the actors are still alive

    # Ray gave each actor one of the two logical GPUs, and no launcher rank.
    assert sorted(r["visible"] for r in reports) == ["0", "1"]
    assert all(r["launcher_rank"] == [] for r in reports)
    assert reports[0]["pid"] != reports[1]["pid"]
    for r, kernel in zip(reports, seen):
        gpu = r["visible"]  # GPU i is on node i, whose CPU is i
        assert kernel.cpus == gpu, (r, kernel)
        assert kernel.thread_cpus == (gpu,), (r, kernel)
        assert kernel.policy == "prefer:0"  # this machine's only memory node
        assert r["summary"].startswith("pynumabind: GPU 0 (0000:")
        # Ray's own answer (ray.get_gpu_ids()), not merely what the actor sees.
        assert r["reasons"][0] == (
            "no launcher rank: bound to the 1 GPU(s) Ray gave this process (ray.get_gpu_ids())"
        )


def test_actor_without_gpus_gets_the_no_gpu_error_from_rays_answer(ray_cluster) -> None:
    """num_gpus=0: Ray sets no CUDA_VISIBLE_DEVICES, so the actor "sees" every GPU.

    Bound by what it sees, it would be confined to the union of all their
    nodes; Ray's own answer says it has none, which is the ConfigError.
    """
    ray = ray_cluster

    @ray.remote(num_gpus=0)
    class CpuOnly:
        def bind(self) -> dict:
            import pynumabind

            before = sorted(os.sched_getaffinity(0))
            try:
                pynumabind.bind_current_process()
            except pynumabind.ConfigError as exc:
                error = str(exc)
            else:
                error = None
            return {
                "error": error,
                "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "unchanged": sorted(os.sched_getaffinity(0)) == before,
            }

    result = ray.get(CpuOnly.remote().bind.remote(), timeout=300)
    assert result["visible"] is None  # Ray 2.60: the actor would see every GPU
    assert result["error"] == (
        "this Ray task or actor was given no GPU (ray.get_gpu_ids() is empty: num_gpus=0?), "
        "so there is nothing to bind to; give it num_gpus, or pass rank= and nprocs= to bind "
        "by rank"
    )
    assert result["unchanged"]


def test_ray_is_never_imported_by_pynumabind() -> None:
    # Asking Ray is for processes that already use it: binding elsewhere
    # must not import it (it is heavy, and would start nothing useful).
    from .helpers import run_python

    result = run_python(
        """
        import sys
        from pynumabind.discovery import detect_topology, ray_gpus
        import pynumabind.integrations.ray  # advise_nodes imports Ray when called, not before
        print("ANSWER", ray_gpus(detect_topology()), "ray" in sys.modules)
        """
    )
    assert "ANSWER None False" in result.stdout, result.stderr[-2000:]


# --- advise_nodes: one advice record per machine type, measured on every Ray node


@pytest.fixture(scope="module")
def two_node_ray() -> Iterator:
    """A real Ray cluster of two nodes on this machine, and the driver connected to it.

    Two raylets (``ray.cluster_utils.Cluster``: what ``ray start --head`` and
    ``ray start --address`` start, each its own node id, object store and
    worker processes), one CPU each, no dashboard, small object stores.  Both
    run on this machine, so both are of its machine type.  Started once for
    the module's tests that use it (about 10 s here), after the tests above.
    """
    require_two_cpus()
    import ray
    from ray.cluster_utils import Cluster

    temp = Path(tempfile.mkdtemp(prefix="pnb-ray-"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_TMPDIR", str(temp))
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        patch.setenv("RAY_AUTH_MODE", "disabled")
        for name in [k for k in os.environ if k.startswith("PYNUMABIND_")]:
            patch.delenv(name)
        node = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False}
        cluster = Cluster(initialize_head=True, head_node_args=node)
        try:
            cluster.add_node(**node)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, log_to_driver=False)
            yield ray
        finally:
            ray.shutdown()
            cluster.shutdown()
            shutil.rmtree(temp, ignore_errors=True)


def test_advise_nodes_saves_each_nodes_record_into_the_directory(two_node_ray, tmp_path) -> None:
    import time

    from pynumabind.integrations.ray import advise_nodes
    from pynumabind.records._host import this_machine
    from pynumabind.records._machine import record_name

    ray = two_node_ray
    alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    assert len(alive) == 2
    records = tmp_path / "records"
    began = time.monotonic()
    saved = advise_nodes(
        f"{records}/", quick=True, copies=False, buffer_bytes=4 << 20, repeats=1, timeout=240
    )
    print(f"\nadvise_nodes on 2 nodes took {time.monotonic() - began:.1f} s")

    # One result per alive node, each measured on its own node in its own worker process.
    assert sorted(r.node_id for r in saved) == alive, saved
    assert all(r.ok for r in saved), saved
    assert len({r.pid for r in saved}) == 2, saved
    assert os.getpid() not in {r.pid for r in saved}
    # Both nodes are this machine's type: the directory holds one record, written twice.
    expected = records / record_name(this_machine())
    assert sorted(records.iterdir()) == [expected]
    assert {r.path for r in saved} == {str(expected)}
    assert (records.stat().st_mode & 0o777, expected.stat().st_mode & 0o777) == (0o755, 0o644)
    document = json.loads(expected.read_text())
    assert {r.verdict for r in saved} == {document["recommendation"]["verdict"]}


def test_advise_nodes_reports_each_nodes_failure_and_raises_when_all_failed(
    two_node_ray, tmp_path
) -> None:
    """A place no node can write (a file is in the way): each node refuses before measuring."""
    from pynumabind.errors import PynumabindError
    from pynumabind.integrations.ray import advise_nodes

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file\n")
    with pytest.raises(PynumabindError) as caught:
        advise_nodes(f"{blocker}/records/", quick=True, copies=False, timeout=120)
    message = str(caught.value)
    assert message.startswith(f"advise_nodes: no node saved a record into {blocker}/records/: ")
    alive = [n["NodeID"] for n in two_node_ray.nodes() if n["Alive"]]
    for node_id in alive:  # each node named, with its own error
        assert f"node {node_id} (" in message
    assert message.count("AdviceRecordError: ") == 2, message
    assert blocker.read_text() == "a file\n"


def _workers_running_advise() -> list:
    """This machine's processes running advise_nodes' task (Ray titles them ``ray::NAME``)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                title = handle.read().split(b"\0")[0]
        except OSError:  # not a process, or gone
            continue
        if title.strip() == b"ray::_advise_here":
            found.append(int(entry))
    return found


def test_advise_nodes_stops_the_tasks_still_measuring_at_the_timeout(
    two_node_ray, tmp_path
) -> None:
    """100,000 samples of 16 MiB: hours of measuring, so both nodes are at it at the deadline.

    Each node's task is cancelled (force: Ray stops its worker), and each node's
    error says so.  Before, a timeout only stopped the wait: both workers went on
    measuring, and would have saved a record behind the caller's back.
    """
    import time

    from pynumabind.errors import PynumabindError
    from pynumabind.integrations.ray import advise_nodes

    records = tmp_path / "records"
    with pytest.raises(PynumabindError) as caught:
        advise_nodes(
            f"{records}/",
            quick=True,
            copies=False,
            buffer_bytes=16 << 20,
            repeats=100_000,
            timeout=5,
        )
    message = str(caught.value)
    stopped = "still measuring after 5 s: its task was cancelled and its worker stopped"
    assert message.count(stopped) == 2, message
    deadline = time.monotonic() + 30  # Ray has said both ended; their processes go too
    while _workers_running_advise() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _workers_running_advise() == []
    assert not list(records.glob("*.json"))


def test_advise_nodes_wants_a_directory(tmp_path) -> None:
    """Refused before Ray is asked anything: a record file would keep one machine type."""
    from pynumabind.errors import ConfigError
    from pynumabind.integrations.ray import advise_nodes

    with pytest.raises(ConfigError, match="name a directory of records"):
        advise_nodes(str(tmp_path / "advice.json"), quick=True)
    assert list(tmp_path.iterdir()) == []
