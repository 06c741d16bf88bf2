"""Lifetime tests: every test here fails on a validation-layer message.

ValidationError already propagates from the call that caused an error, but two kinds of
message never reach a caller: errors the layer reports while a manager closes (the
manager logs them, it cannot raise from close() at interpreter exit) and validation
warnings (logged). This autouse fixture turns both into test failures."""
from __future__ import annotations

import logging

import pytest



class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def fail_on_validation_messages(request):
    """Any WARNING or ERROR on the "scopedgpu" logger fails the test (validation
    errors at close, validation warnings); a test that expects one marks itself with
    @pytest.mark.allow_scopedgpu_log."""
    handler = _Collect()
    logger = logging.getLogger("scopedgpu")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
    if request.node.get_closest_marker("allow_scopedgpu_log"):
        return
    bad = [f"{r.levelname}: {r.getMessage()}" for r in handler.records]
    assert not bad, "scopedgpu logged:\n" + "\n".join(bad)


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_scopedgpu_log: the test expects scopedgpu "
                            "to log warnings or errors")
