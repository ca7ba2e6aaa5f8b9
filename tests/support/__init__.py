"""The helpers that several test folders share, imported relatively.

What sits here serves two test folders or more; a helper that one folder uses
sits beside that folder's tests (``tests/binding/child_binding.py``), and
``tests/package/test_layers.py`` keeps it so.  The shared ones, by kind:

* child processes: ``childproc`` runs a module-level function in a fresh
  interpreter through the ``_child.py`` script; ``childstate`` reads a
  child's own CPUs and policy; ``child_cold`` and ``child_environ`` are child
  bodies that several folders run; ``unprivileged`` runs a function in a
  forked child that dropped root (what ``nobody`` may read of its own pages);
* machines: ``sysfs_tree`` (fake sysfs trees from ``tests/machines/``),
  ``sysfs_oracle`` and ``libnuma_oracle`` (what the kernel and the real
  libnuma say, to compare against), ``topology_builders`` (topologies as
  values, and their hypothesis strategies), ``fake_nvml`` (a fake ``pynvml``
  at its function boundary, fed from the same descriptions);
* the command line and the machine around it: ``cli_helpers`` (the console
  script in a child, the two-node snapshot), ``cgroups`` (real cgroup v1
  cpusets), ``seccomp_filter`` (real EPERM from a seccomp filter),
  ``root_setup`` (what the suite installs or starts as root, said at the
  start, and the variable that turns it off);
* the rest: ``advice_builders`` (measurement matrices), ``recipes`` (the
  recipes of docs/integrations.md, and reading a process through /proc),
  ``import_scan`` (the package's imports, read from its source).

How the tests import them, and why
----------------------------------
``tests`` is a package tree: ``tests/__init__.py`` and one ``__init__.py`` in
every folder.  A test imports a shared helper relatively, ``from ..support
import cli_helpers`` (``from ...support`` in ``tests/vm/guest``), and one of its
own folder as ``from . import child_binding``.

That works in each of pytest's import modes, both tried on this tree (pytest
9): with ``prepend``, the default, pytest finds the top of the package tree
(the first folder upward without an ``__init__.py``: the checkout) and puts it
first on ``sys.path``; with ``importlib`` it leaves ``sys.path`` alone and
imports each test file under the same dotted name (``tests.binding.test_bind``,
packages above it included).  Either way the relative imports resolve, from
any working directory and with ``--rootdir`` anywhere.  The suite keeps the
default, ``prepend``: every runner already uses it (the README's ``python3 -m
pytest``, tox, the framework lanes of ``.ci/integrations``, the nvidia-ml-py
floor, the QEMU guest) and none needs an option, and putting the checkout
first means a ``tests`` package that a framework's environment may ship in
site-packages cannot stand in for this one.  Nothing here relies on that
choice: the ``pythonpath = ["."]`` setting in pyproject.toml puts the
checkout first on the path in either mode.

The previous layout, the helpers as loose top-level modules found because
pytest put ``tests/`` itself on ``sys.path`` for the top ``conftest.py``
(``import childproc``), worked only under ``prepend`` and ``append``, made
every helper a top-level module name (``recipes``, ``cgroups``) that could
clash with an installed one, and needed every test file's name unique.

Children import by dotted name too.  ``childproc`` starts ``_child.py`` by
path with the folder that holds ``tests`` and the function's full module name
(``tests.binding.child_binding:bind_cpu1_node0``), so a child body's relative
imports work in the child as under pytest.  The QEMU guest runs pytest on
the host's checkout with the host's ``sys.path`` (``tests/vm/harness.py``),
so the same names resolve there.  The ``__init__.py`` files hold only a
docstring: a child that measures what a fresh interpreter loads
(``child_cold``) loads nothing more through them.
"""
