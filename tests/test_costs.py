"""CostModel (sim/costs.py): layer ranges equal the per-layer sum of the profile's tables, and the
cached cost arrays are shared and read-only."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard_fixtures import EXAMPLE
from profiler.schema import load_profile
from sim.costs import cost_model


@pytest.fixture(scope="module")
def example():
    return load_profile(EXAMPLE)


def test_layer_ranges_equal_the_per_layer_sum(example):
    cm = cost_model(example)
    c = np.array([64.0, 100.0, 300.0, 900.0])
    for lo, hi in ((0, 10), (10, 30), (0, 30), (15, 16)):
        want = [sum(example.layer_ms(layer, 1, ctx) for layer in range(lo, hi)) for ctx in c]
        assert cm.layers(c, lo, hi) == pytest.approx(want, rel=1e-12)
    # several new tokens (an EESD verification) interpolate over n as well
    want = [sum(example.layer_ms(layer, 3, ctx) for layer in range(20, 30)) for ctx in c]
    assert cm.layers(c, 20, 30, 3) == pytest.approx(want, rel=1e-12)


def test_cost_arrays_are_read_only_and_shared(example):
    cm = cost_model(example)
    c = np.arange(100.0, 180.0)
    a = cm.layers(c, 0, 10)
    assert a is cm.layers(c.copy(), 0, 10)  # same values, same cached array
    with pytest.raises(ValueError):
        a[0] = 1.0
