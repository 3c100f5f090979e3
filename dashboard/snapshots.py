"""Drive the real app in headless Chromium: used by the browser test and by python -m bench.screenshots.

Starts `streamlit run dashboard/app.py` on a free localhost port, opens each page with
Playwright (Debian's /usr/bin/chromium, no downloaded browser), waits for the script to finish
and the plotly charts to draw, and reports what it saw. Imports Playwright only when called.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ppsd.net import free_port
from ppsd.paths import PROJECT_ROOT

CHROMIUM = os.environ.get("PPSD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# url path of each page (Streamlit derives it from the file name; the default page is "/")
PAGE_URLS = {"overview": "", "profile": "profile", "planner": "planner", "timeline": "timeline",
             "validation": "validation", "profile_model": "profile_model"}


@contextlib.contextmanager
def serve(env: dict | None = None, port: int | None = None, timeout: float = 60.0):
    """Run the dashboard on localhost; yield its base URL; stop it (its process group) after."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(PROJECT_ROOT / "dashboard" / "app.py"),
           "--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
           "--client.toolbarMode", "viewer"]  # no Deploy button in screenshots
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited early:\n{proc.stdout.read().decode(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("streamlit did not become healthy in time")
            time.sleep(0.3)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class PageShot:
    page: str
    exceptions: int
    errors: list[str]
    charts: int  # plotly charts with an SVG or canvas drawn
    title: str
    screenshot: Path | None
    seconds: float


def _wait_idle(page, timeout_ms: int) -> None:
    """Until Streamlit's 'running' indicator has gone (the script finished) for a moment."""
    deadline = time.time() + timeout_ms / 1000
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_ms)
    quiet_since = None
    while time.time() < deadline:
        running = page.locator('[data-testid="stStatusWidget"]').count() > 0
        if running:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        elif time.time() - quiet_since > 1.0:
            return
        page.wait_for_timeout(150)


def visit(url: str, pages: list[str], out_dir: Path | None, min_charts: dict[str, int] | None = None,
          timeout_s: float = 90.0, viewport=(1400, 1000)) -> list[PageShot]:
    """Open each page in a fresh tab of one headless Chromium; wait until it has drawn at least
    `min_charts[page]` plotly charts (or the timeout), then record what is on it."""
    from playwright.sync_api import sync_playwright

    shots = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                          device_scale_factor=1)
            for name in pages:
                t0 = time.time()
                page = context.new_page()
                page.goto(f"{url}/{PAGE_URLS[name]}", wait_until="domcontentloaded", timeout=timeout_s * 1000)
                _wait_idle(page, int(timeout_s * 1000))
                want = (min_charts or {}).get(name, 0)
                drawn = ('[data-testid="stPlotlyChart"] .js-plotly-plot svg.main-svg, '
                         '[data-testid="stPlotlyChart"] .js-plotly-plot canvas')
                if want:
                    with contextlib.suppress(Exception):
                        page.wait_for_function(
                            "([sel, n]) => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .js-plotly-plot')"
                            ".length >= n && [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"] "
                            ".js-plotly-plot')].every(p => p.querySelector('svg.main-svg, canvas'))",
                            arg=[drawn, want], timeout=timeout_s * 1000)
                page.wait_for_timeout(400)  # let plotly finish its transitions before the picture
                charts = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').evaluate_all(
                    "ps => ps.filter(p => p.querySelector('svg.main-svg, canvas')).length")
                shot = None
                if out_dir is not None:
                    out_dir.mkdir(parents=True, exist_ok=True)
                    shot = out_dir / f"{name}.png"
                    page.screenshot(path=str(shot), full_page=False)
                shots.append(PageShot(
                    page=name,
                    exceptions=page.locator('[data-testid="stException"]').count(),
                    errors=page.locator('[data-testid="stAlertContentError"]').all_inner_texts(),
                    charts=charts,
                    title=page.title(),
                    screenshot=shot,
                    seconds=time.time() - t0,
                ))
                page.close()
        finally:
            browser.close()
    return shots
