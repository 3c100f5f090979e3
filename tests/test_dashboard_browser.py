"""The dashboard in a real browser: the app served on a free localhost port, every page opened in
headless Chromium (Debian's package, driven by Playwright's Python package), no Streamlit
exception block on any page, every plotly chart drawn (SVG or canvas in the DOM), screenshots
saved."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from dashboard import snapshots
from dashboard_fixtures import EXAMPLE, make_validation

pytestmark = pytest.mark.browser

# charts each page draws on the example profile with one validation folder present
MIN_CHARTS = {"overview": 1, "profile": 2, "planner": 2, "timeline": 2, "validation": 1, "profile_model": 0}


def test_every_page_in_headless_chromium(tmp_path):
    assert Path(snapshots.CHROMIUM).exists() or shutil.which("chromium"), \
        "chromium is missing: `make browser-deps` (run by `make test`) installs Debian's package"
    assert (EXAMPLE / "profile.json").exists(), "the committed example profile is missing"
    make_validation(tmp_path / "runs")
    env = {"PPSD_DATA_DIRS": os.pathsep.join([str(EXAMPLE.parent), str(tmp_path / "runs")]),
           "PPSD_CACHE": str(tmp_path / "cache")}
    shots_dir = tmp_path / "screenshots"
    with snapshots.serve(env) as url:
        shots = snapshots.visit(url, list(MIN_CHARTS), shots_dir, MIN_CHARTS)
    for s in shots:
        print(f"{s.page}: {s.charts} charts, {s.seconds:.1f} s, {s.screenshot}")
        assert s.exceptions == 0, f"{s.page} shows a Streamlit exception block"
        assert not s.errors, f"{s.page} shows errors: {s.errors}"
        assert s.charts >= MIN_CHARTS[s.page], f"{s.page}: {s.charts} plotly charts drawn, want {MIN_CHARTS[s.page]}"
        assert s.screenshot.exists() and s.screenshot.stat().st_size > 10_000
