"""The Kubernetes recipe's files: they parse, agree with each other and with the docs.

No Kubernetes cluster runs here, and the image is not built: this checks
the shape and the consistency of ``docs/site/examples/kubernetes/`` (what
the docs section says plainly), not that a cluster runs them.

* each file is shown in docs/integrations.md byte for byte, after a
  ``<!-- file: PATH -->`` marker, and every such marker names a real file;
* the manifests parse (PyYAML), and are a DaemonSet and a Pod of the API
  versions Kubernetes serves them under;
* the DaemonSet's command is a valid ``pynumabind advise --save DIR/`` line,
  parsed by pynumabind's own CLI parser, and DIR names a directory by the
  path rule; the ``hostPath``, the mount paths and the workers'
  ``PYNUMABIND_ADVICE`` are that same directory; the workers mount it
  read-only and set ``PYNUMABIND_MODE=advised``;
* the DaemonSet's image is the one the Dockerfile says to build, and the
  Dockerfile installs what the docs say the image must contain (Python,
  libnuma1, pynumabind).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Dict, List

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extra: pip install '.[test]'")

from pynumabind.cli import build_parser  # noqa: E402
from pynumabind.records._paths import names_directory  # noqa: E402

from ..support.recipes import INTEGRATIONS, ROOT  # noqa: E402

EXAMPLES = ROOT / "docs" / "site" / "examples" / "kubernetes"
FILES = ("Dockerfile", "advise-daemonset.yaml", "worker-pod.yaml")
_SHOWN = re.compile(r"^<!-- file: (\S+) -->\n```[a-z]*\n(.*?)^```$", re.M | re.S)


def _manifest(name: str) -> Dict[str, Any]:
    documents = list(yaml.safe_load_all((EXAMPLES / name).read_text(encoding="utf-8")))
    assert len(documents) == 1, name
    document: Dict[str, Any] = documents[0]
    return document


def _volume(spec: Dict[str, Any], name: str) -> Dict[str, Any]:
    found = [v for v in spec["volumes"] if v["name"] == name]
    assert len(found) == 1, spec["volumes"]
    volume: Dict[str, Any] = found[0]
    return volume


def _env(container: Dict[str, Any]) -> Dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


def test_the_docs_show_each_file_byte_for_byte() -> None:
    text = INTEGRATIONS.read_text(encoding="utf-8")
    shown = {path: body for path, body in _SHOWN.findall(text)}
    assert len(shown) == len(re.findall(r"<!-- file: ", text)), "a marker without its block"
    expected = {f"docs/site/examples/kubernetes/{name}" for name in FILES}
    assert set(shown) == expected
    for path, body in shown.items():
        assert body == (ROOT / path).read_text(encoding="utf-8"), f"{path} differs from the docs"
    assert sorted(p.name for p in EXAMPLES.iterdir()) == sorted(FILES)
    assert "No Kubernetes cluster runs in pynumabind's tests" in text


def test_the_daemonset_saves_into_the_directory_the_workers_read() -> None:
    daemonset = _manifest("advise-daemonset.yaml")
    pod = _manifest("worker-pod.yaml")
    assert (daemonset["apiVersion"], daemonset["kind"]) == ("apps/v1", "DaemonSet")
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    template = daemonset["spec"]["template"]
    assert template["metadata"]["labels"] == daemonset["spec"]["selector"]["matchLabels"]
    spec = template["spec"]

    (advise,) = spec["initContainers"]
    command: List[str] = advise["command"]
    assert command[0] == "pynumabind"
    args = build_parser().parse_args(command[1:])  # pynumabind's own parser takes the line
    assert (args.command, args.quick) == ("advise", True), args
    directory = args.save
    assert directory.endswith("/") and names_directory(directory)
    (mount,) = advise["volumeMounts"]
    assert mount["mountPath"] + "/" == directory
    assert not mount.get("readOnly", False)
    host = _volume(spec, mount["name"])["hostPath"]
    assert (host["path"] + "/", host["type"]) == (directory, "DirectoryOrCreate")
    assert [c["image"].split(":")[0] for c in spec["containers"]] == ["registry.k8s.io/pause"]

    (worker,) = pod["spec"]["containers"]
    assert _env(worker) == {"PYNUMABIND_MODE": "advised", "PYNUMABIND_ADVICE": directory}
    (read,) = worker["volumeMounts"]
    assert read["readOnly"] is True
    assert read["mountPath"] + "/" == directory
    assert _volume(pod["spec"], read["name"])["hostPath"]["path"] == host["path"]


def test_the_daemonset_runs_the_image_the_dockerfile_builds() -> None:
    dockerfile = (EXAMPLES / "Dockerfile").read_text(encoding="utf-8")
    build = re.search(r"^#\s+(docker build .*)$", dockerfile, re.M)
    assert build is not None, "the Dockerfile says how to build it"
    words = shlex.split(build.group(1))
    image = words[words.index("-t") + 1]
    (advise,) = _manifest("advise-daemonset.yaml")["spec"]["template"]["spec"]["initContainers"]
    assert advise["image"] == image
    # What the docs say the image must contain: Python, libnuma1 and pynumabind.
    instructions = [
        line.split(None, 1)
        for line in dockerfile.replace("\\\n", " ").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert instructions[0][0] == "FROM" and instructions[0][1].startswith("python:")
    runs = [body for keyword, body in instructions if keyword == "RUN"]
    assert any("apt-get install" in r and re.search(r"\blibnuma1\b", r) for r in runs), runs
    assert any(re.search(r"\bpip install\b.*\bpynumabind\b", r) for r in runs), runs
    assert {keyword for keyword, _ in instructions} <= {"FROM", "RUN"}  # no entrypoint to mind


def test_the_manifests_say_what_they_are() -> None:
    """The docs' prose claims, against the files: read-only in pods, root writes the record."""
    text = Path(INTEGRATIONS).read_text(encoding="utf-8")
    section = text.split("## Kubernetes:", 1)[1].split("\n## ", 1)[0]
    for value in ("/var/lib/pynumabind/", "PYNUMABIND_MODE=advised", "libnuma1", "hostPath"):
        assert value in section, value
    (advise,) = _manifest("advise-daemonset.yaml")["spec"]["template"]["spec"]["initContainers"]
    assert "securityContext" not in advise  # the image's user: root, as the docs say
