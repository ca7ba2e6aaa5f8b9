"""The bind path's logger (:class:`pynumabind._os.forksafe.Logger`): logging only when needed.

Each case runs in a fresh interpreter: whether ``logging`` is loaded is the
point.  Without it, DEBUG and INFO are dropped without importing it (nothing
could have configured it) and a warning imports it and is said as logging
says it (its last-resort handler, on stderr); with it, every record is
logging's own, named, leveled and placed at the caller.
"""

from __future__ import annotations

from ..support.childproc import bare_env, run_in_child
from . import child_forksafe


def test_below_warning_nothing_is_imported_and_a_warning_is_said() -> None:
    found, stderr = run_in_child(
        child_forksafe.logger_without_logging, env=bare_env(), flags=["-S"]
    )
    assert found["quiet"] == {"enabled": False, "loaded": False}
    assert found["loaded_after_warning"] is True
    assert stderr.strip().splitlines() == ["pynumabind: said once"]


def test_with_logging_loaded_each_record_is_loggings_at_the_callers_place() -> None:
    found, _ = run_in_child(child_forksafe.logger_with_logging)
    assert found["enabled"] is True
    assert found["records"] == [
        ["pynumabind.check", "DEBUG", "d 1", "logger_with_logging", "child_forksafe.py"],
        ["pynumabind.check", "INFO", "i 2", "logger_with_logging", "child_forksafe.py"],
        ["pynumabind.check", "WARNING", "from a caller", "_a_caller", "child_forksafe.py"],
    ]


def test_the_levels_are_loggings() -> None:
    import logging

    from pynumabind._os import forksafe

    assert (forksafe.DEBUG, forksafe.INFO, forksafe.WARNING) == (
        logging.DEBUG,
        logging.INFO,
        logging.WARNING,
    )


def test_the_set_up_given_runs_once_before_the_first_warning_and_none_forgets_it() -> None:
    found, stderr = run_in_child(
        child_forksafe.logger_when_logging_loads, env=bare_env(), flags=["-S"]
    )
    assert found["before"] == {"runs": 0, "loaded": False}  # an INFO loads and runs nothing
    assert found["runs"] == [True]  # once, with logging loaded
    assert found["kept"] == ["first warning", "second warning", "third warning"]
    assert stderr.strip() == ""  # every warning went to the handler it set up
