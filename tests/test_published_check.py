"""bench/published_check.py: published batch-1 figures next to the analytic estimate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.estimated_profile import estimated_step_ms
from profiler.stacks import EAGER_DISPATCH_US

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pc():
    from bench import published_check

    return published_check


def test_table_is_what_the_target_asks_for(pc):
    rows = pc.PUBLISHED
    assert len(rows) >= 6
    assert {r["stack"] for r in rows} == {"compiled", "eager"}
    assert {"a100-80gb", "h100-sxm"} <= {r["gpu"] for r in rows}
    for r in rows:  # every figure is sourced and batch-1 decode with a dtype
        assert r["url"].startswith("https://") and r["source"] and r["where"] and r["dtype"]
        assert r["published_tokens_per_s"] > 0 and r["role"] in ("fit", "held-out")
    assert sum(r["role"] == "fit" for r in rows) >= 1
    assert sum(r["role"] == "held-out" and r["stack"] == "eager" for r in rows) >= 1  # eager checked out of sample


def test_error_is_computed_from_the_table(pc):
    row = dict(pc.PUBLISHED[0], published_tokens_per_s=50.0, role="held-out")
    est = 1e3 / estimated_step_ms(row["arch"], row["gpu"], row["dtype"], row["context"], stack=row["stack"])
    res = pc.check([row])
    assert res["rows"][0]["estimated_tokens_per_s"] == pytest.approx(est, abs=0.01)
    assert res["rows"][0]["error_pct"] == pytest.approx((est - 50.0) / 50.0 * 100, abs=0.01)
    # change the published figure: the error follows it (nothing hard-coded)
    res2 = pc.check([dict(row, published_tokens_per_s=100.0)])
    assert res2["rows"][0]["error_pct"] == pytest.approx((est - 100.0) / 100.0 * 100, abs=0.01)
    assert res2["mape_pct"]["all"] == pytest.approx(abs(res2["rows"][0]["error_pct"]), abs=0.01)
    # the stack of a row decides its estimate
    eager = pc.check([dict(row, stack="eager")])["rows"][0]
    assert eager["estimated_tokens_per_s"] < res["rows"][0]["estimated_tokens_per_s"] / 2
    assert eager["compiled_estimate_tokens_per_s"] == pytest.approx(res["rows"][0]["estimated_tokens_per_s"])


def test_mape_split_in_sample_and_held_out(pc):
    a = dict(pc.PUBLISHED[0], key="a", role="fit")
    b = dict(pc.PUBLISHED[0], key="b", role="held-out")
    est = pc.estimate_tokens_per_s(a)
    res = pc.check([dict(a, published_tokens_per_s=est / 1.1), dict(b, published_tokens_per_s=est / 0.8)])
    assert res["mape_pct"]["in_sample"] == pytest.approx(10.0, abs=0.05)
    assert res["mape_pct"]["held_out"] == pytest.approx(20.0, abs=0.05)
    assert res["mape_pct"]["all"] == pytest.approx(15.0, abs=0.05)


def test_eager_default_is_the_documented_fit(pc):
    fit_rows = [r for r in pc.PUBLISHED if r["role"] == "fit"]
    assert fit_rows and all(r["stack"] == "eager" for r in fit_rows)
    assert pc.fit_dispatch_us(fit_rows) == pytest.approx(EAGER_DISPATCH_US, abs=0.05)


def test_estimate_within_target(pc):
    res = pc.check()
    assert res["mape_pct"]["all"] <= 10.0 and res["mape_pct"]["held_out"] <= 10.0
    assert res["mape_pct_without_stack_choice"] > 50.0  # eager figures priced as compiled are far off


def test_json_alone_on_stdout():
    r = subprocess.run([sys.executable, "-m", "bench.published_check", "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {"rows", "mape_pct", "eager_dispatch_us", "excluded"} <= set(data)
    row = data["rows"][0]
    assert {"model", "gpu", "stack", "source", "published_tokens_per_s", "estimated_tokens_per_s",
            "error_pct"} <= set(row)
