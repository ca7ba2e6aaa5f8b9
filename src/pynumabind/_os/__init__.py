"""The operating-system boundary: every read of ``/proc`` and ``/sys`` is in this folder.

Each OS file has one reader here, which translates its errors once (into
the typed errors of :mod:`pynumabind.errors`, or the "unknown" value it
documents); the floors above ask these modules for facts and name no OS
path or file of their own (``tests/package/test_os_paths.py``).  The two
roots are named once, below: a default such as ``sysfs_root`` anywhere in
the package is :data:`SYSFS_ROOT`.
"""

#: The live machine's sysfs; any other root is a copied tree or a test fixture.
SYSFS_ROOT = "/sys"

#: The live machine's procfs.
PROC_ROOT = "/proc"
