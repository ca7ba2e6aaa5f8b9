"""Run the NVML tests against the oldest nvidia-ml-py that pyproject.toml allows.

    python3 .ci/nvml_oldest.py --venv DIR [PYTEST ARGS]   # a fresh venv of its own
    python .ci/nvml_oldest.py --here [PYTEST ARGS]         # .ci/run, tox -e nvml-oldest

The floor is read from pyproject.toml's ``nvidia-ml-py>=X`` dependency (the
only copy of the number; tests/discovery/test_nvml.py checks that ``_nvml.NVML_PY_FLOOR``
equals it).  ``--venv`` makes a fresh venv at DIR (nothing from the system's
site-packages) and installs this package with its test extra and
``nvidia-ml-py==X`` into it; then this script runs again, ``--here``, under
the venv's interpreter.  Its temporary directories go where the README's
tests put theirs (in RAM where there is room: tests/conftest.py): these tests
write recorded machines' sysfs trees, and on the development machine's disk
they took 29 s instead of 8 s.
``--here`` installs ``nvidia-ml-py==X`` into the running interpreter's
environment (a venv only: it never downgrades a system Python's) unless it
is there already, and runs ``tests/discovery/test_nvml.py`` with
``PYNUMABIND_EXPECT_NVML_PY=X``: a test there fails unless the ``pynvml`` it
imports is that release's, so the run cannot pass on another version.  CI
tooling, not the library: it runs pip and pytest as subprocesses.
"""

# ruff: noqa: S603, PLC0415 - CI tooling: runs pip and pytest; tomllib only where it exists
from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def floor() -> str:
    pyproject = ROOT / "pyproject.toml"
    found: list[str]
    try:
        import tomllib
    except ImportError:  # Python < 3.11: the same line, read as text
        found = re.findall(r'"nvidia-ml-py>=([^",;\s]+)"', pyproject.read_text(encoding="utf-8"))
    else:
        with pyproject.open("rb") as f:
            deps = tomllib.load(f)["project"]["dependencies"]
        found = [str(m.group(1)) for d in deps if (m := re.fullmatch(r"nvidia-ml-py>=(\S+)", d))]
    if len(found) != 1:
        raise SystemExit(f"{pyproject}: want one 'nvidia-ml-py>=X' dependency, found {found}")
    return found[0]


def installed() -> str | None:
    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    version = floor()
    if argv[:1] == ["--venv"] and len(argv) >= 2:
        venv = Path(argv[1])
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run(
            [python, "-m", "pip", "install", "-q", f"{ROOT}[test]", f"nvidia-ml-py=={version}"],
            check=True,
        )
        here = [python, __file__, "--here", *argv[2:]]
        return subprocess.run(here, check=False).returncode
    if argv[:1] != ["--here"]:
        raise SystemExit(__doc__)
    if sys.prefix == sys.base_prefix:
        raise SystemExit(f"--here needs a venv (tox's, or --venv's), not {sys.prefix}")
    if installed() != version:
        pip = [sys.executable, "-m", "pip", "install", "-q", f"nvidia-ml-py=={version}"]
        subprocess.run(pip, check=True)
    env = dict(os.environ, PYNUMABIND_EXPECT_NVML_PY=version)
    print(f"nvml-oldest: tests/discovery/test_nvml.py against nvidia-ml-py=={version}", flush=True)
    test = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    test.append("tests/discovery/test_nvml.py")
    return subprocess.run([*test, *argv[1:]], cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
