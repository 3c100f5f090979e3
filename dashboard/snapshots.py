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
             "validation": "validation", "traffic": "traffic", "profile_model": "profile_model"}


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


@dataclass(frozen=True)
class Visit:
    """One page at one window size, optionally with a query (`profile=examples/NAME` opens that profile)."""

    page: str
    width: int = 1400
    height: int = 1000
    query: str = ""
    min_charts: int = 0
    probe: bool = False  # read what the page shows (`PROBE_JS`) into PageShot.facts
    options_of: str = ""  # a selectbox's label: open it and list its options in facts["options"]

    @property
    def name(self) -> str:
        tail = f"-{self.query.split('=')[-1].replace('/', '_')}" if self.query else ""
        return f"{self.page}-{self.width}{tail}"


@dataclass
class PageShot:
    page: str
    exceptions: int
    errors: list[str]
    charts: int  # plotly charts with an SVG or canvas drawn
    title: str
    screenshot: Path | None
    seconds: float
    visit: Visit | None = None
    facts: dict | None = None  # PROBE_JS's reading of the page, when the visit asked for it


# What a reader sees, read in the browser: each metric's texts and whether any is cut (an element whose
# content is wider than its box), each plotly figure's traces and layout meta (plotly keeps them on the
# chart's element), the main area's text, each selectbox's shown value, and where the first headline ends.
PROBE_JS = """() => {
  const cut = el => [el, ...el.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1
      && getComputedStyle(e).overflow !== 'visible');
  const txt = (root, sel) => { const e = root.querySelector(sel); return e ? e.innerText.trim() : null; };
  const metrics = [...document.querySelectorAll('[data-testid="stMetric"]')].map(m => ({
    label: txt(m, '[data-testid="stMetricLabel"]'), value: txt(m, '[data-testid="stMetricValue"]'),
    delta: txt(m, '[data-testid="stMetricDelta"]'), bottom: m.getBoundingClientRect().bottom,
    cut: [...m.querySelectorAll('[data-testid="stMetricLabel"], [data-testid="stMetricValue"], '
        + '[data-testid="stMetricDelta"]')].some(cut)}));
  const charts = [...document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')].map(p => ({
    title: (((p.layout || {}).title || {}).text || '').replace(/<[^>]+>/g, ''), meta: (p.layout || {}).meta || null,
    height: p.getBoundingClientRect().height,
    traces: (p._fullData || p.data || []).map(t => ({name: t.name || '', meta: t.meta || null,
        type: t.type || 'scatter', mode: t.mode || '', fill: t.fill || '',
        y: (t.y && typeof t.y.length === 'number') ? Array.from(t.y).map(Number) : []}))}));
  const main = document.querySelector('[data-testid="stMain"]') || document.body;
  const selects = [...document.querySelectorAll('[data-testid="stSelectbox"] input[role="combobox"]')].map(i => ({
    label: i.getAttribute('aria-label'), value: i.value}));
  const h4 = main.querySelector('[data-testid="stMarkdownContainer"] h4');
  const headline = h4 ? {text: h4.innerText, bottom: h4.getBoundingClientRect().bottom} : null;
  return {metrics, charts, text: main.innerText, selects, headline,
          viewport: {width: window.innerWidth, height: window.innerHeight}};
}"""


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


def visit(url: str, pages: list, out_dir: Path | None, min_charts: dict[str, int] | None = None,
          timeout_s: float = 90.0, viewport=(1400, 1000)) -> list[PageShot]:
    """Open each page (a page name, or a `Visit`: a window size, a query, a probe) in a fresh tab of one
    headless Chromium; wait until it has drawn at least its charts (`min_charts[page]`, or the Visit's), or
    the timeout, then record what is on it."""
    from playwright.sync_api import sync_playwright

    visits = [v if isinstance(v, Visit) else Visit(v, viewport[0], viewport[1],
                                                   min_charts=(min_charts or {}).get(v, 0)) for v in pages]
    shots = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                          device_scale_factor=1)
            for v in visits:
                shots.append(_visit_one(context, url, v, out_dir, timeout_s, named=not any(
                    isinstance(p, Visit) for p in pages)))
        finally:
            browser.close()
    return shots


def _visit_one(context, url: str, v: Visit, out_dir: Path | None, timeout_s: float, named: bool) -> PageShot:
    t0 = time.time()
    page = context.new_page()
    page.set_viewport_size({"width": v.width, "height": v.height})
    page.goto(f"{url}/{PAGE_URLS[v.page]}" + (f"?{v.query}" if v.query else ""), wait_until="domcontentloaded",
              timeout=timeout_s * 1000)
    _wait_idle(page, int(timeout_s * 1000))
    if v.min_charts:
        with contextlib.suppress(Exception):
            page.wait_for_function(
                "n => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .js-plotly-plot').length >= n && "
                "[...document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .js-plotly-plot')]"
                ".every(p => p.querySelector('svg.main-svg, canvas'))", arg=v.min_charts, timeout=timeout_s * 1000)
    page.wait_for_timeout(400)  # let plotly finish its transitions before the picture
    charts = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').evaluate_all(
        "ps => ps.filter(p => p.querySelector('svg.main-svg, canvas')).length")
    shot = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        shot = out_dir / f"{v.page if named else v.name}.png"
        page.screenshot(path=str(shot), full_page=False)
    facts = page.evaluate(PROBE_JS) if v.probe else None
    if v.options_of and facts is not None:
        facts["options"] = _options(page, v.options_of)
    result = PageShot(page=v.page, exceptions=page.locator('[data-testid="stException"]').count(),
                      errors=page.locator('[data-testid="stAlertContentError"]').all_inner_texts(), charts=charts,
                      title=page.title(), screenshot=shot, seconds=time.time() - t0, visit=v, facts=facts)
    page.close()
    return result


def _options(page, label: str) -> list[str]:
    """The options a selectbox offers, read by opening it (Streamlit draws them only while it is open)."""
    box = page.locator(f'[data-testid="stSelectbox"]:has(input[aria-label="{label}"])').first
    box.locator('button[aria-label="Open"]').click()
    page.wait_for_selector('[role="option"]', timeout=10_000)
    options = page.locator('[role="option"]').all_inner_texts()
    page.keyboard.press("Escape")
    return [o.strip() for o in options]
