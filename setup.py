"""setuptools shim: the only thing pyproject.toml cannot say is cffi_modules.

The cffi module is built in ABI out-of-line mode (``set_source(..., None)``),
which emits pure Python: no compiler, no numa.h, a ``py3-none-any`` wheel.
"""

from setuptools import setup

setup(cffi_modules=["src/pynumabind/_libnuma_build.py:build_ffi"])
