"""scopedgpu's pytest plugin, loaded by pytest through the `pytest11` entry point
whenever scopedgpu is installed: no conftest line is needed.

- the `sg_manager` fixture (see scopedgpu.testing);
- `--sg-device=INDEX_OR_NAME`: the device that `sg_manager` and LifetimeMachine open
  (default: SCOPEDGPU_DEVICE, else the best device);
- hypothesis profiles `sg-quick` (the default budget of a LifetimeMachine) and `sg-long`
  (a long run): `pytest --hypothesis-profile=sg-long`, or HYPOTHESIS_PROFILE=sg-long.

From a source checkout that is not installed, load it with `pytest -p
scopedgpu.pytest_plugin` or `pytest_plugins = ["scopedgpu.pytest_plugin"]` in a conftest.
"""
from __future__ import annotations

import os
from typing import Any

import pytest

from scopedgpu import testing
from scopedgpu._settings import device_spec

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover - hypothesis is optional
    pass
else:
    _SLOW = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
             HealthCheck.data_too_large]
    # Every example of a GPU test opens pipelines and submits work: budgets are counted
    # in tens of examples, and deadlines make no sense (the first example compiles).
    settings.register_profile("sg-quick", max_examples=20, stateful_step_count=20,
                              deadline=None, suppress_health_check=_SLOW)
    settings.register_profile("sg-long", max_examples=1000, stateful_step_count=50,
                              deadline=None, suppress_health_check=_SLOW)


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("scopedgpu")
    group.addoption("--sg-device", dest="sg_device", default=None, metavar="INDEX_OR_NAME",
                    help="device for the sg_manager fixture and LifetimeMachine: an index "
                         "or a name substring (default: SCOPEDGPU_DEVICE, else the best "
                         "device)")


def pytest_configure(config: Any) -> None:
    device = config.getoption("sg_device", None)
    if device is not None:
        testing.set_default_device(device_spec(device))
    # hypothesis' own plugin loads --hypothesis-profile; HYPOTHESIS_PROFILE is honoured
    # here when it names a profile that exists (sg-quick, sg-long, or one of yours).
    name = os.environ.get("HYPOTHESIS_PROFILE")
    if name and not config.getoption("--hypothesis-profile", None):
        try:
            from hypothesis import settings as hs
            hs.load_profile(name)
        except ImportError:  # pragma: no cover - hypothesis is optional
            pass
        except Exception as exc:  # hypothesis raises InvalidArgument for unknown names
            raise pytest.UsageError(f"HYPOTHESIS_PROFILE={name!r}: {exc}") from exc


sg_manager = testing.sg_manager
