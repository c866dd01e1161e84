"""The one `device` fixture every test uses.

Its devices come from LEANPASS_TEST_DEVICES (comma-separated; nox sets it to one
backend per session); without it a plain `pytest` runs every device: cpu,
strict and cuda. A device that cannot be used here (no CuPy, no GPU) is a
visible skip with the reason, never a fake.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from leanpass.backends import canonical_device, get_backend

settings.register_profile(
    "leanpass", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "leanpass"))

ALL_DEVICES = ("cpu", "strict", "cuda")


def requested_devices() -> list[str]:
    names = os.environ.get("LEANPASS_TEST_DEVICES", "")
    return [n.strip() for n in names.split(",") if n.strip()] or list(ALL_DEVICES)


def _device_params():
    params = []
    for name in requested_devices():
        canonical_device(name)  # a misspelled name is an error here, not a skip
        try:
            device = get_backend(name).device
        except RuntimeError as exc:
            params.append(pytest.param(name, id=name, marks=pytest.mark.skip(reason=f"{name}: {exc}")))
        else:
            params.append(pytest.param(device, id=name))
    return params


DEVICE_PARAMS = _device_params()


@pytest.fixture(params=DEVICE_PARAMS)
def device(request) -> str:
    """A canonical device string: 'cpu', 'strict' or 'cuda:0'."""
    return request.param


@pytest.fixture
def backend(device):
    return get_backend(device)


def pytest_report_header(config):
    lines = []
    for name in requested_devices():
        try:
            lines.append(f"leanpass device {name}: {get_backend(name).device}")
        except RuntimeError as exc:
            lines.append(f"leanpass device {name}: SKIPPED ({exc})")
    return lines


# LEANPASS_GRADGRAD=1: every test that calls `gradcheck` checks second derivatives too
# (`gradgradcheck`, through backward with create_graph=True); `nox -s gradgrad` runs it.
# Tests whose points have no second derivative, or where LeanPass's is known to differ,
# keep a first-order check only (test name, a regular expression: the reason).
FIRST_ORDER_ONLY = {
    r"test_binary_gradcheck_with_python_scalars\[.*-(maximum|minimum)\]":
        "the scalar equals a value of the input: a tie, where the first derivative jumps",
}

if os.environ.get("LEANPASS_GRADGRAD"):
    import re

    import leanpass

    def _both(fn, inputs, **tolerances):
        result = leanpass.gradcheck(fn, inputs, **tolerances)
        leanpass.gradgradcheck(fn, inputs, **tolerances)
        return result

    @pytest.fixture(autouse=True)
    def _second_order(request, monkeypatch):
        module = request.module
        if any(re.fullmatch(pattern, request.node.name) for pattern in FIRST_ORDER_ONLY):
            return
        if getattr(module, "gradcheck", None) is leanpass.gradcheck:
            monkeypatch.setattr(module, "gradcheck", _both)
