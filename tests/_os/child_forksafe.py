"""Child bodies of _os/test_forksafe.py: fork while another thread is inside pynumabind.

Each runs in a fresh interpreter (only the *first* use imports), so nothing
of pynumabind is imported at module level here.  Each forks from the main
thread and returns :func:`await_child`'s verdict on the forked child.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List


def await_child(pid: int, limit: float = 10.0) -> str:
    """``exit N`` for a child that finished within ``limit`` s; else kill it: ``DEADLOCK``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return f"exit {os.waitstatus_to_exitcode(status)}"
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "DEADLOCK"


def fork_a_binding_child(bind: Callable[[], Any]) -> int:
    """Fork; the child calls ``bind`` and exits 0 when it returned a binding with a
    plan (4: without one, 3: it raised).  The parent gets the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            code = 0 if bind().plan is not None else 4
        finally:
            os._exit(code)
    return pid


class _PauseImport:
    """A meta-path finder that stops the import of pynumabind.binding in ``parent``."""

    def __init__(self, parent: int, paused: threading.Event, forked: threading.Event) -> None:
        self.parent, self.paused, self.forked = parent, paused, forked

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pynumabind.binding" and os.getpid() == self.parent and not self.paused.is_set():
            self.paused.set()
            self.forked.wait(2.0)


def fork_during_a_lazy_export_import() -> str:
    import pynumabind

    parent = os.getpid()
    paused, forked = threading.Event(), threading.Event()
    sys.meta_path.insert(0, _PauseImport(parent, paused, forked))
    thread = threading.Thread(target=lambda: pynumabind.bind_current_process)
    thread.start()
    paused.wait()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            assert callable(pynumabind.bind_current_process)
            module = sys.modules["pynumabind.binding"]
            code = 0 if hasattr(module, "apply_plan") else 4  # imported whole, or not begun
        finally:
            os._exit(code)
    forked.set()
    thread.join()
    return await_child(pid)


def fork_racing_the_first_bind(delay: str) -> str:
    import pynumabind

    def bind() -> Any:
        return pynumabind.bind_current_process(0, nprocs=1, environ={})

    thread = threading.Thread(target=bind)
    thread.start()
    time.sleep(float(delay))
    pid = fork_a_binding_child(bind)
    thread.join()
    return await_child(pid)


def fork_during_a_bind() -> str:
    import pynumabind
    from pynumabind.binding import _apply

    assert callable(pynumabind.bind_current_process)  # imports done: only the bind itself is racing
    inside, forked = threading.Event(), threading.Event()
    original = _apply.bind_cpus

    def paused_bind_cpus(*args: Any, **kwargs: Any) -> Any:
        inside.set()
        forked.wait(2.0)
        return original(*args, **kwargs)

    _apply.bind_cpus = paused_bind_cpus
    thread = threading.Thread(
        target=lambda: pynumabind.bind_current_process(0, nprocs=1, cpus="1", environ={})
    )
    thread.start()
    inside.wait()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if os.sched_getaffinity(0) == {1} else 5)
    forked.set()
    thread.join()
    return await_child(pid)


def fork_while_a_lock_is_never_released() -> str:
    from pynumabind._os import forksafe as _forksafe

    _forksafe.FORK_WAIT = 0.3
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with _forksafe.lock():
            taken.set()
            done.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        got = _forksafe.lock().acquire(timeout=5)
        os._exit(0 if got else 6)
    waited = time.monotonic() - started
    verdict = await_child(pid)
    done.set()
    thread.join()
    return verdict if 0.25 <= waited < 5 else f"fork waited {waited:.2f} s"


class _PauseLogging:
    """A meta-path finder that holds the first import of logging in ``parent`` for 0.3 s."""

    def __init__(self, parent: int, paused: threading.Event) -> None:
        self.parent, self.paused = parent, paused

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "logging" and os.getpid() == self.parent and not self.paused.is_set():
            self.paused.set()
            time.sleep(0.3)


#: What :func:`_bind_then_warn` says (on stderr, by logging's last-resort handler).
WARNED = "pynumabind: a bind's warning"


def _bind_then_warn() -> Any:
    """A bind, then a warning through the bind path's own logger, as a bind that warns says it.

    ``logging`` is not loaded yet: the warning imports it, holding the fork
    lock (:class:`pynumabind._os.forksafe.Logger`), the one import of
    ``logging`` the fork handlers expect to meet under the lock.
    """
    import pynumabind
    from pynumabind._os import forksafe

    binding = pynumabind.bind_current_process(0, nprocs=1, environ={})
    forksafe.Logger("pynumabind.binding").warning("pynumabind: %s", "a bind's warning")
    return binding


def _bind() -> Any:
    import pynumabind

    return pynumabind.bind_current_process(0, nprocs=1, environ={})


def fork_waiting_for_the_first_lock() -> str:
    """Fork while a bind's warning imports logging under the lock (held there for 0.3 s)."""
    import pynumabind  # noqa: F401 - the package first, as a worker has it

    assert "logging" not in sys.modules, "logging was loaded before the race"
    parent = os.getpid()
    paused = threading.Event()
    sys.meta_path.insert(0, _PauseLogging(parent, paused))
    thread = threading.Thread(target=_bind_then_warn)
    thread.start()
    paused.wait()
    pid = fork_a_binding_child(_bind)
    thread.join()
    import logging

    logging.getLogger("after").warning("logging still works in the parent")
    return await_child(pid)


def fork_once_logging_registered_its_handlers() -> Dict[str, Any]:
    """Fork while a bind's warning imports logging under the lock, after logging's module
    registered its fork handlers: logging's *before* handler is in this fork's
    list and runs first, and the import still has to take logging's lock."""
    import pynumabind  # noqa: F401 - the package first, as a worker has it

    assert "logging" not in sys.modules, "logging was loaded before the race"
    parent = os.getpid()
    registered = threading.Event()
    real = os.register_at_fork

    def register(**handlers: Any) -> None:
        real(**handlers)
        caller = sys._getframe(1).f_globals.get("__name__")
        if caller == "logging" and os.getpid() == parent and not registered.is_set():
            registered.set()
            time.sleep(0.3)  # the main thread's fork begins meanwhile

    os.register_at_fork = register  # type: ignore[assignment]
    thread = threading.Thread(target=_bind_then_warn)
    thread.start()
    registered.wait()
    before = time.monotonic()
    pid = fork_a_binding_child(_bind)
    waited = time.monotonic() - before
    os.register_at_fork = real  # type: ignore[assignment]
    thread.join()
    return {"child": await_child(pid), "fork_waited": round(waited, 3)}


def _entry_call(entry: str, snapshot: str) -> Callable[[], Any]:
    """The first call of one public entry point (the caller's imports done before the race)."""
    import pynumabind
    from pynumabind import integrations

    gpus = {"PYNUMABIND_TOPOLOGY": snapshot, "CUDA_VISIBLE_DEVICES": "0,1"}
    # A lazy export is looked up here, before the race, as a caller would.
    if entry == "bind":
        bind = pynumabind.bind_current_process
        return lambda: bind(0, nprocs=1, environ={})
    if entry == "bind_gpu":
        return lambda: integrations.bind_gpu(0, what="trial", environ=gpus)
    if entry == "bind_visible_gpus":
        return lambda: integrations.bind_visible_gpus(environ=gpus)
    if entry == "detect_topology":
        detect: Callable[[], Any] = pynumabind.detect_topology
        return detect
    if entry == "resolve_topology":
        resolve = pynumabind.resolve_topology
        return lambda: resolve(environ=gpus)
    if entry == "load_topology":
        load = pynumabind.load_topology
        return lambda: load(snapshot)
    raise SystemExit("unknown entry " + entry)


class _ImportRecorder:
    """A meta-path finder that notes each new import of one thread, and whether the
    fork lock was held then (it finds nothing: the import goes on as usual)."""

    def __init__(self) -> None:
        from pynumabind._os import forksafe

        self.forksafe, self.thread = forksafe, threading.get_ident()
        self.inside: List[str] = []
        self.outside: List[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if threading.get_ident() == self.thread:
            held = self.forksafe.lock()._is_owned()  # type: ignore[attr-defined]
            (self.inside if held else self.outside).append(name)


def imports_of_a_first_call(entry: str, snapshot: str) -> Dict[str, List[str]]:
    """The modules one entry point's lazy export and first call import, inside and
    outside the fork lock, in an interpreter that has not loaded importlib yet."""
    import pynumabind  # the caller's own imports, as a worker makes them
    from pynumabind import integrations  # noqa: F401

    # A venv's interpreter starts without importlib (only some site .pth files
    # load it), so the first lazy export imports it: drop it to be that one.
    sys.modules.pop("importlib", None)
    recorder = _ImportRecorder()
    sys.meta_path.insert(0, recorder)
    try:
        _entry_call(entry, snapshot)()
    finally:
        sys.meta_path.remove(recorder)
    assert pynumabind.__name__ == "pynumabind"
    return {"inside": recorder.inside, "outside": recorder.outside}


def _await_all(children: List[int], limit: float) -> List[str]:
    return [await_child(pid, limit) for pid in children]


def fork_trial(entry: str, seed: str, snapshot: str, forks: str, span: str) -> Dict[str, Any]:
    """One trial: a thread makes the process's first call of ``entry``; the main
    thread forks ``forks`` times at random moments of it; each child makes the
    same call, then binds.  Hangs are ``DEADLOCK`` verdicts."""
    import random

    random.seed(int(seed))
    delays = sorted(random.uniform(0.0, float(span)) for _ in range(int(forks)))
    import pynumabind

    call = _entry_call(entry, snapshot)
    outcome: Dict[str, str] = {}

    def first_call() -> None:
        try:
            call()
            outcome["thread"] = "ok"
        except BaseException as exc:
            outcome["thread"] = repr(exc)

    thread = threading.Thread(target=first_call)
    start = time.monotonic()
    thread.start()
    children: List[int] = []
    waits: List[float] = []
    for delay in delays:
        time.sleep(max(0.0, start + delay - time.monotonic()))
        before = time.monotonic()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                call()
                code = 0 if pynumabind.bind_current_process(0, nprocs=1, environ={}).plan else 4
            finally:
                os._exit(code)
        waits.append(round(time.monotonic() - before, 3))
        children.append(pid)
    verdicts = _await_all(children, 15.0)
    thread.join(15.0)
    return {
        "thread": outcome.get("thread", "HUNG"),
        "children": verdicts,
        "fork_waits": waits,
        "delays": [round(d, 3) for d in delays],
    }


def fork_handlers_registered(snapshot: str) -> List[Any]:
    """Every os.register_at_fork from a bare import through each entry point's first call."""
    made: List[Any] = []
    real = os.register_at_fork

    def recording(**handlers: Any) -> None:
        caller = sys._getframe(1).f_globals.get("__name__", "?")
        made.append([caller, sorted(handlers)])
        real(**handlers)

    os.register_at_fork = recording
    import pynumabind
    from pynumabind import integrations

    gpus = {"PYNUMABIND_TOPOLOGY": snapshot, "CUDA_VISIBLE_DEVICES": "0,1"}
    pynumabind.detect_topology()
    pynumabind.load_topology(snapshot)
    pynumabind.resolve_topology(environ=gpus)
    integrations.gate("PYNUMABIND_VLLM", {})
    binding = integrations.bind_gpu(0, what="t", environ=gpus)
    binding.verify()
    binding.restore()
    integrations.bind_visible_gpus(environ=gpus).restore()
    pynumabind.bind_current_process(0, nprocs=1, environ={}).restore()
    return made


def logger_without_logging() -> Dict[str, Any]:
    """What :class:`pynumabind._os.forksafe.Logger` loads: nothing below WARNING, logging for one.

    Run with ``logging`` not loaded (a fresh ``-S`` interpreter has none).
    """
    from pynumabind._os import forksafe

    assert "logging" not in sys.modules, "logging was loaded before the check"
    log = forksafe.Logger("pynumabind.check")
    log.debug("debug %s", "dropped")
    log.info("info %s", "dropped")
    quiet = {"enabled": log.isEnabledFor(20), "loaded": "logging" in sys.modules}
    log.warning("pynumabind: said %s", "once")
    return {"quiet": quiet, "loaded_after_warning": "logging" in sys.modules}


def _a_caller(log: Any) -> None:
    log.warning("from %s", "a caller")


def logger_with_logging() -> Dict[str, Any]:
    """With logging loaded and configured, each record is logging's, with the caller's place."""
    import logging

    from pynumabind._os import forksafe

    records: List[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logging.getLogger("pynumabind").addHandler(Keep())
    logging.getLogger("pynumabind").setLevel(logging.DEBUG)
    log = forksafe.Logger("pynumabind.check")
    log.debug("d %d", 1)
    log.info("i %d", 2)
    _a_caller(log)
    return {
        "enabled": log.isEnabledFor(logging.DEBUG),
        "records": [
            [r.name, r.levelname, r.getMessage(), r.funcName, os.path.basename(r.pathname)]
            for r in records
        ],
    }


def logger_when_logging_loads() -> Dict[str, Any]:
    """:func:`pynumabind._os.forksafe.when_logging_loads`: run once, before the first record.

    Run with ``logging`` not loaded.  The set-up given adds a handler that
    keeps the records: a warning it keeps was handed to logging after it ran.
    """
    from pynumabind._os import forksafe

    assert "logging" not in sys.modules, "logging was loaded before the check"
    runs: List[bool] = []
    kept: List[str] = []

    def configure() -> None:
        import logging

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                kept.append(record.getMessage())

        runs.append("logging" in sys.modules)
        logging.getLogger("pynumabind").addHandler(Keep())

    forksafe.when_logging_loads(configure)
    log = forksafe.Logger("pynumabind.check")
    log.info("dropped, nothing loaded")
    before = {"runs": len(runs), "loaded": "logging" in sys.modules}
    log.warning("first %s", "warning")
    log.warning("second %s", "warning")
    forksafe.when_logging_loads(lambda: runs.append(False))
    forksafe.when_logging_loads(None)  # forgotten: never runs
    log.warning("third %s", "warning")
    return {"before": before, "runs": runs, "kept": kept}
