"""A real one-node Slurm cluster on localhost, for the Slurm recipe's tests.

Debian's ``slurmctld``, ``slurmd``, ``slurm-client`` and ``munge`` are
installed with apt-get when missing (as root; an already-present
``/usr/sbin/policy-rc.d`` is respected, otherwise one is put there for the
install only, so the packages' services are not started on the host).  The
cluster itself lives in a temporary directory and touches nothing of the
host's Slurm or MUNGE setup (and none of it happens under
``PYNUMABIND_TESTS_NO_ROOT_SETUP=1``: see ``tests/support/root_setup.py``):

* its own ``munged`` (own key, own socket: ``AuthInfo=socket=...``);
* ``slurmctld`` and ``slurmd`` in the foreground as children of the test
  process, on free TCP ports on 127.0.0.1, ``SlurmUser=root``;
* one node with 2 CPUs (``SlurmdParameters=config_overrides``: the node is
  used as configured even on a bigger machine);
* ``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/affinity``:
  neither needs cgroups, and task/affinity is the plugin that binds tasks by
  default, which is what the recipe's ``--cpu-bind=none`` is about.

:func:`start` raises :class:`SlurmUnavailable` with the reason (and the
daemons' log tails) when anything cannot be installed or started.

Cost, measured on the 2-vCPU development machine (Debian 12, Slurm 22.05):
installing the 8 packages (no recommends, package lists present) and
starting the cluster took 10.6 s; starting it with the packages installed,
1.2 s; the three Slurm tests, about 3 s more.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from ..support import root_setup

PACKAGES = root_setup.SLURM_PACKAGES
PROGRAMS = root_setup.SLURM_PROGRAMS
NODE = "pnbnode"
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


class SlurmUnavailable(Exception):
    """The cluster cannot run here; the message says why."""


def _which(program: str) -> Optional[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return shutil.which(program, path=path)


def _apt_install() -> None:
    apt = shutil.which("apt-get")
    if apt is None:
        raise SlurmUnavailable(f"{', '.join(PACKAGES)} missing and there is no apt-get")
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"{', '.join(PACKAGES)} missing and not root (cannot apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    command = [apt, "-o", "DPkg::Lock::Timeout=300", "-y", "-qq"]
    install = [*command, "install", "--no-install-recommends", *PACKAGES]
    # Keep the packages' init scripts from starting host services.
    added_policy = not POLICY_RC_D.exists()
    if added_policy:
        POLICY_RC_D.write_text("#!/bin/sh\n# pynumabind tests: no service starts\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
    try:
        proc = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:  # a fresh machine may have no package lists yet
            subprocess.run([*command, "update"], env=env, capture_output=True, check=False)
            proc = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    finally:
        if added_policy:
            POLICY_RC_D.unlink()
    if proc.returncode != 0:
        raise SlurmUnavailable(
            f"apt-get install {' '.join(PACKAGES)} failed ({proc.returncode}): "
            f"{proc.stderr.strip()[-500:]}"
        )


def ensure_installed() -> Dict[str, str]:
    """Paths of the Slurm and MUNGE programs, installing the packages if needed."""
    if not all(_which(p) for p in PROGRAMS):
        _apt_install()
    paths = {p: _which(p) for p in PROGRAMS}
    missing = [p for p, path in paths.items() if path is None]
    if missing:
        raise SlurmUnavailable(f"installed {', '.join(PACKAGES)} but {missing} not found")
    return {p: path for p, path in paths.items() if path is not None}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Cluster:
    """A running cluster; :meth:`env` is what ``srun`` needs to find it."""

    directory: Path
    conf: Path
    programs: Dict[str, str]
    daemons: List[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self, base: Dict[str, str]) -> Dict[str, str]:
        """``base`` without any Slurm variables of an enclosing job, plus SLURM_CONF."""
        env = {k: v for k, v in base.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def logs(self) -> str:
        parts = []
        for log in sorted(self.directory.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                daemon.terminate()
        for daemon in reversed(self.daemons):
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


def _config(directory: Path, munge_socket: Path, cpus: int) -> str:
    host = socket.gethostname().split(".")[0]
    return f"""\
ClusterName=pynumabind
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd.pid
SlurmctldLogFile={directory}/slurmctld.log
SlurmdLogFile={directory}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def _wait(what: str, ready: Callable[[], bool], cluster: Cluster, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        for daemon in cluster.daemons:
            if daemon.poll() is not None:
                raise SlurmUnavailable(
                    f"{daemon.args[0]} exited ({daemon.returncode}) before {what}\n{cluster.logs()}"
                )
        if time.monotonic() > deadline:
            raise SlurmUnavailable(
                f"timed out after {timeout:.0f} s waiting for {what}\n{cluster.logs()}"
            )
        time.sleep(0.1)


def start(directory: Path, cpus: int = 2) -> Cluster:
    """Install if needed and start munged, slurmctld and slurmd; wait for the node.

    Never under ``PYNUMABIND_TESTS_NO_ROOT_SETUP=1`` (``tests/support/root_setup.py``):
    the daemons run as root even when the packages are there.
    """
    if root_setup.off():
        raise SlurmUnavailable(
            root_setup.skip_reason(
                f"installing (when missing) {', '.join(PACKAGES)} and starting "
                f"{', '.join(root_setup.SLURM_DAEMONS)}"
            )
        )
    if os.geteuid() != 0:
        raise SlurmUnavailable("slurmd must run as root to launch tasks, and this is not root")
    programs = ensure_installed()
    for sub in ("state", "spool", "munge"):
        (directory / sub).mkdir(parents=True)
    (directory / "munge").chmod(0o700)
    key = directory / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = directory / "munge" / "munge.sock"
    conf = directory / "slurm.conf"
    conf.write_text(_config(directory, munge_socket, cpus))
    cluster = Cluster(directory=directory, conf=conf, programs=programs)
    env = cluster.env(dict(os.environ))
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "env": env}
    try:
        munged = [
            programs["munged"], "--foreground", "--force", f"--socket={munge_socket}",
            f"--key-file={key}", f"--pid-file={directory}/munge/munged.pid",
            f"--log-file={directory}/munged.log", f"--seed-file={directory}/munge/seed",
        ]  # fmt: skip
        cluster.daemons.append(subprocess.Popen(munged, stderr=subprocess.DEVNULL, **quiet))
        _wait("munged's socket", munge_socket.exists, cluster)
        for name, *options in (["slurmctld", "-D"], ["slurmd", "-D", "-N", NODE]):
            with open(directory / f"{name}.stderr.log", "w") as log:
                command = [programs[name], *options, "-f", str(conf)]
                cluster.daemons.append(subprocess.Popen(command, stderr=log, **quiet))

        def node_idle() -> bool:
            state = subprocess.run(
                [programs["sinfo"], "-h", "-n", NODE, "-o", "%T"],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            return state.stdout.strip() == "idle"

        _wait(f"node {NODE} to be idle", node_idle, cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster
