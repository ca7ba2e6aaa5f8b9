"""The records tests' fixture: the store's warnings in one test."""

from __future__ import annotations

import logging
from typing import Iterator, List

import pytest

from pynumabind.records import store


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def store_warnings() -> Iterator[List[str]]:
    """The WARNING messages the store logs in this test (its once-per-process memory cleared)."""
    logger = logging.getLogger(store.__name__)
    handler, level = _Warnings(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    store._WARNED.clear()
    yield handler.messages
    logger.removeHandler(handler)
    logger.setLevel(level)
