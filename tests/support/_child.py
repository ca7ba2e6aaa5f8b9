"""Entry point of a child interpreter: run one importable function, nothing else.

``python [flags] tests/support/_child.py ALARM DIR MODULE:FUNCTION [ARG ...]``
puts ``DIR`` (the folder that holds the ``tests`` package) first on
``sys.path``, imports ``MODULE`` by its dotted name (``tests.binding.child_binding``,
so its relative imports resolve), calls ``FUNCTION(*ARGS)`` with the arguments
as strings and, when it returns something other than None, prints that as one
JSON object on the last stdout line.  Built by :func:`childproc.child_command`;
never source text.

It imports nothing of its own before the function runs (``faulthandler`` is
built in and ``_signal`` is loaded at interpreter start; the ``__init__.py``
of ``tests`` and of its folders hold only a docstring), so a test that
measures what a fresh interpreter loads (discovery/test_cost.py) still
measures only the function's imports.  A hung child dumps its stacks and dies
at ALARM seconds: a signal, not a watchdog thread, since tests count threads.
ALARM 0 sets none: a function that execs another program must pass 0, since
a pending alarm survives execve and would kill that program.
"""

import sys


def main(argv: "list[str]") -> None:
    import _signal
    import faulthandler

    alarm, folder, target, *args = argv
    if int(alarm) > 0:
        if sys.stderr is not None:  # None when started with standard error closed
            faulthandler.register(_signal.SIGALRM, chain=True)
        _signal.alarm(int(alarm))
    sys.path.insert(0, folder)
    module_name, _, name = target.partition(":")
    module = __import__(module_name, fromlist=[name])
    result = getattr(module, name)(*args)
    if result is not None:
        import json

        sys.stdout.write("\n" + json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.path.pop(0)  # this folder: DIR is put back explicitly, first
    main(sys.argv[1:])
