"""Drivers of launchers/test_multiprocessing.py: the recipe's pools, run in a child.

The recipe itself (its page of docs/site, unchanged) is written by the test to
``bindrecipe.py`` in a folder that each driver puts on ``sys.path`` first
(multiprocessing's spawned workers inherit that path).  Run through
``childproc.child_command``; each prints its result as the old driver script
did.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def hold(ready_dir: str, release: str) -> int:
    """One task per worker: announce this worker, wait until the test has looked."""
    open(os.path.join(ready_dir, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the workers")
        time.sleep(0.01)
    return os.getpid()


def run_pool(recipe_dir: str, kind: str, method: str, ready_dir: str, release: str) -> None:
    """A pool of 2 from the recipe (``pool`` or ``executor``); print the pids that answered."""
    sys.path.insert(0, recipe_dir)
    from bindrecipe import bound_executor, bound_pool

    args = [(ready_dir, release)] * 2
    pool: Any
    if kind == "pool":
        with bound_pool(2, method) as pool:
            pids = pool.starmap(hold, args, chunksize=1)
    else:
        with bound_executor(2, method) as pool:
            pids = list(pool.map(hold, *zip(*args)))
    print(sorted(pids))


def run_failing_executor(recipe_dir: str) -> None:
    """Submit one task to the recipe's executor; print how it broke, if it did."""
    sys.path.insert(0, recipe_dir)
    from concurrent.futures.process import BrokenProcessPool

    from bindrecipe import bound_executor

    try:
        with bound_executor(2) as pool:
            pool.submit(os.getpid).result()
    except BrokenProcessPool as exc:
        print("BrokenProcessPool:", exc)
