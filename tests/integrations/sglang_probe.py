"""A test-only SGLang general plugin: parks each scheduler so the test can look.

The test makes this module a plugin without installing anything: it writes a
``*.dist-info`` with an ``sglang.srt.plugins`` entry point into a directory
on ``PYTHONPATH`` (:func:`write_distribution`), and SGLang's real plugin
loader finds it there beside pynumabind's.  The hook runs just before the
``Scheduler`` is built, which is after pynumabind's hook bound the process
and before SGLang needs a GPU ("Expected a cuda device" here).  It writes the
scheduler's pid and process title, then waits until the test has read the
binding from outside through /proc.  It binds nothing and reads nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def write_distribution(directory: Path) -> None:
    info = directory / "pynumabind_test_probe-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pynumabind-test-probe\nVersion: 0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[sglang.srt.plugins]\npynumabind_test_probe = sglang_probe:register\n", encoding="utf-8"
    )


def _park(*args: Any, **kwargs: Any) -> None:
    import setproctitle
    from probe_report import report_and_wait

    title = setproctitle.getproctitle()
    record = {"pid": os.getpid(), "ppid": os.getppid(), "title": title}
    report_and_wait(f"scheduler-{os.getpid()}", record)


def register() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    target = "sglang.srt.managers.scheduler.Scheduler.__init__"
    HookRegistry.register(target, _park, HookType.BEFORE)
