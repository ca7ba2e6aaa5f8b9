"""Objects in pynumabind's module namespaces behave like plain objects to code that scans them.

vLLM 0.33's Triton dispatcher walks every module in ``sys.modules`` and, for each value with a
``__dict__``, reads ``vars(value).get("kernel")``.  A stand-in whose ``__getattr__`` answered
``__dict__`` with a function broke every vLLM 0.33 worker that had imported pynumabind.
"""

from __future__ import annotations

import logging
import sys
import types

import pytest

import pynumabind
import pynumabind.binding
import pynumabind.discovery


@pytest.mark.parametrize("level", [logging.WARNING, logging.INFO])
def test_every_value_with_a_dict_has_a_mapping_for_one(level: int) -> None:
    logger = logging.getLogger("pynumabind")
    before = logger.level
    logger.setLevel(level)
    try:
        pynumabind.detect_topology(use_nvml=False)
        checked = 0
        for name, module in list(sys.modules.items()):
            if not name.startswith("pynumabind"):
                continue
            for attr, value in list(vars(module).items()):
                if hasattr(value, "__dict__"):
                    assert isinstance(vars(value), (dict, types.MappingProxyType)), (name, attr)
                    checked += 1
                for dunder in ("__wrapped__", "kernel", "__dict__"):
                    found = getattr(value, dunder, None)
                    assert not (dunder == "__dict__" and callable(found)), (name, attr)
        assert checked > 100
    finally:
        logger.setLevel(before)
