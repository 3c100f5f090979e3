"""How fast the What-if planner answers each control (target ≤ 0.5 s), cold and warm.

    .venv/bin/python -m bench.bench_dashboard [--profile examples/smollm2-135m-cpu] [--repeats 1]

Runs the app in Streamlit's AppTest (no browser) and times the script rerun after each control
change, the figure a user waits for (the browser adds its own render on top). Columns:
  * cold: every value new to the session and nothing swept ahead. A sweep-level control (devices
    up, hop, acceptance scale, temperature, exit head) answers at once from the closed forms while
    the worker runs the exact sweep of just that setting;
  * refined: from the same control change until the page shows the exact trace-driven sweep
    (cold + the background sweep + one more rerun), what the page's auto-refresh waits for;
  * no preview: cold with the closed-form preview turned off, the sweep in the foreground (what
    the preview saves);
  * warm: the planner's background worker has swept the neighbouring settings first (a user
    pausing between moves), as the page really runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboard import data, sweep_cache  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

APP = str(ROOT / "dashboard" / "app.py")


def _control(at: AppTest, label: str):
    return next(w for w in [*at.slider, *at.select_slider] if w.label == label)


def _reachable(control, value):
    """`value`, or the nearest of a select slider's options (an exit head traced at a few exits only)."""
    options = getattr(control, "options", None)
    if not options or str(value) in options or not all(str(o).isdigit() for o in options):
        return value
    return min((int(o) for o in options), key=lambda o: abs(o - float(value)))


def _moves(profile_dir: Path) -> list[tuple[str, object]]:
    meta = json.loads((profile_dir / "profile.json").read_text())
    t_rec = float((meta.get("acceptance") or {}).get("temperature") or 0.0)
    moves = [("exit layer E", 10), ("draft length γ (EESD)", 6), ("stages k (PPSD)", 3), ("devices", 6),
             ("hop latency (ms)", 1.0), ("acceptance scale", 1.25), ("hop latency (ms)", 0.2),
             ("acceptance scale", 0.75), ("devices", 2), ("exit layer E", 3)]
    if t_rec > 0:
        moves.insert(6, ("temperature", t_rec))
    return moves


def _wait_warm(timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while sweep_cache.CACHE.busy() and time.time() < deadline:
        time.sleep(0.1)


def _fresh_server() -> None:
    """Forget everything a previous run cached in this process, as a restarted server would."""
    import streamlit as st

    from sim.model import cost_model as costs
    from sim.model import streams

    sweep_cache.CACHE.shutdown()
    sweep_cache.CACHE = sweep_cache.SweepCache()
    st.cache_data.clear()
    st.cache_resource.clear()
    sweep_cache.profile.cache_clear()
    costs._MODELS.clear()
    streams._TRACES.clear()


def run(profile_dir: Path, mode: str) -> list[tuple[str, float]]:
    _fresh_server()
    on_screen: list = []
    if mode in ("cold", "refined"):
        warm = sweep_cache.CACHE.warm

        def first_only(wanted):
            # only what the page asks first for the setting on screen (it at this and at the most
            # devices), nothing for other values of any control
            on_screen[:] = wanted[:1]
            warm(wanted[:2])

        sweep_cache.CACHE.warm = first_only
    elif mode == "no preview":
        sweep_cache.CACHE.warm = lambda wanted: None
        sweep_cache.CACHE.failures = 6  # what makes the page give up on previews (a broken worker)
    os.environ[data.DATA_DIRS_ENV] = str(profile_dir.parent)
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["profile_path"] = data.display_name(profile_dir, [profile_dir.parent])
    at.run()
    t = time.perf_counter()
    at.switch_page("views/planner.py").run()
    out = [("open planner", time.perf_counter() - t)]
    for box in (b for b in at.selectbox if b.label == "exit head"):
        box.set_value("shared").run()  # the head every move below exists for (sampled β, every exit)
    for label, value in _moves(profile_dir):
        _wait_warm()
        t = time.perf_counter()
        control = _control(at, label)
        control.set_value(_reachable(control, value)).run()
        if mode == "refined" and any("Preview:" in c.value for c in at.caption):
            # the page's refresh fragment polls every 0.25 s and reruns once this setting is swept
            deadline = time.time() + 60
            while sweep_cache.CACHE.cached(*on_screen[0]) is None and time.time() < deadline:
                time.sleep(0.02)
            at.run()
        out.append((f"{label} → {value}", time.perf_counter() - t))
        problems = [e.value for e in at.exception] + [e.value for e in at.error]
        if problems:
            raise SystemExit(f"bench_dashboard: error: {label}: {problems[0]}")
    sweep_cache.CACHE.shutdown()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=str(ROOT / "examples" / "smollm2-135m-cpu"))
    ap.add_argument("--repeats", type=int, default=1, help="runs per mode; the median is printed")
    args = ap.parse_args()
    profile_dir = Path(args.profile).resolve()
    modes = ("cold", "refined", "no preview", "warm")
    res = {}
    for mode in modes:
        runs = [run(profile_dir, mode) for _ in range(args.repeats)]
        res[mode] = [(runs[0][i][0], statistics.median(r[i][1] for r in runs)) for i in range(len(runs[0]))]
    print(f"planner script time per control change, {profile_dir.name} (s; target ≤ 0.5)")
    print(f"{'control':<32}" + "".join(f"{m:>11}" for m in modes))
    for i, (label, _) in enumerate(res["cold"]):
        vals = [res[m][i][1] for m in modes]
        flag = "  cold > 0.5" if res["cold"][i][1] > 0.5 and label != "open planner" else ""
        print(f"{label:<32}" + "".join(f"{v:11.3f}" for v in vals) + flag)
    moves = {m: [v for label, v in res[m] if label != "open planner"] for m in ("cold", "warm")}
    print(f"FIGURE planner_cold_max_s = {max(moves['cold']):.3f}  (target <= 0.5 s; the slowest control change, "
          "nothing swept ahead)")
    print(f"FIGURE planner_warm_max_s = {max(moves['warm']):.3f}  (the slowest control change, its neighbours "
          "swept ahead)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
