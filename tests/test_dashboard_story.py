"""The dashboard tells the verdict's story (issue 51), checked on its data functions without a browser, on the
committed examples: the pictures and tables plot the figure the verdict decides by (against AR on every core
where the profile has thread tables, one thread beside it) and mark the verdict's plan; the batch section prices
`ppsd plan --batch B`'s heads and plans; Validation opens on the greedy out-of-sample run with its key columns
first and words for what a row lacks; acceptance-only folders are offered under *Acceptance from* only; one α per
plan. tests/test_dashboard_browser.py checks what a browser shows of the same."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from dashboard import answer, batch, charts, data, sweep_cache, tables
from dashboard_fixtures import EXAMPLE
from ppsd.paths import EXAMPLES_DIR, PROJECT_ROOT
from sim.planner.heads import available_heads, decide_over_heads
from sim.planner.verdict import Outcome, plan_alpha

BATCH_PROFILE = EXAMPLES_DIR / "smollm2-135m-batch-amd-epyc" / "profile"


def _swept(path):
    """(profile, {head: Results}, verdict) as the Overview gets them (dashboard/sweep_cache.py, every head at
    `ppsd plan`'s defaults, `decide_over_heads`)."""
    from sim.planner import gpus

    prof = sweep_cache.profile(str(path), 0.0)
    devices = gpus.default_devices(prof)
    by_head = {h: sweep_cache.compute(sweep_cache.Key(str(path), 0.0, None, exit_head=h), devices).results
               for h in available_heads(prof)}
    return prof, by_head, decide_over_heads(by_head, prof)


@pytest.fixture(scope="module")
def default_swept():
    return _swept(EXAMPLE)


@pytest.fixture(scope="module")
def batch_swept():
    return _swept(BATCH_PROFILE)


def _plan_values(fig) -> list[float]:
    """Every plotted value of a figure's plans (traces not marked as a reference: intervals, y = x)."""
    return [float(y) for t in fig.data if t.meta != "reference" for y in (t.y if t.y is not None else [])
            if y is not None and y == y]


def test_pictures_and_tables_plot_the_figure_the_verdict_decides_by(default_swept):
    """The committed profile has thread tables and the verdict keeps AR on both cores: every exit-layer curve,
    the exit-head bars and the top-plans table are in the same-budget figure, none above the baseline at 1×,
    AR on one thread drawn where it is (1 / AR's thread gain), and the one-thread figure beside it."""
    profile, by_head, v = default_swept
    assert v.same_budget and v.outcome is not Outcome.WIN, v.text  # what the committed profile's verdict is
    b = answer.basis(v)
    assert b.baseline == v.baseline == "AR on all 2 cores" and b.column == "speedup_tp"
    head = v.best_speculative.plan.exit_head
    table = tables.results_table(by_head[head])
    curves = tables.curves(table, b)
    on_curve = curves.set_index(["mode", "exit_layer", "k"])
    for (mode, e, k), point in on_curve.iterrows():  # each point is a plan's same-budget figure, one thread beside
        rows = table[(table["mode"] == mode) & (table["exit_layer"] == e)]
        rows = rows[rows["stages"] == k] if k else rows
        best = rows.loc[rows["speedup_tp"].idxmax()]
        assert point["speedup"] == best["speedup_tp"] and point["one_thread"] == best["speedup"]
    fig = charts.speedup_vs_exit(curves, tables.closed_curves([]), answer.marker(v, head), [], profile.num_layers, b)
    assert max(_plan_values(fig)) <= 1.0  # nothing above the line the verdict compares with: it names no win
    assert max(table["speedup"]) > 1.0  # ... although the one-thread figure of some plan is above 1
    lines = sorted(round(s.y0, 4) for s in fig.layout.shapes if s.type == "line" and s.y0 == s.y1)
    assert lines == sorted([1.0, round(v.one_unit_level, 4)]) and v.one_unit_level < 1.0
    assert not any("formula" in t.name for t in fig.data)  # one-thread formulas are left off this figure
    assert fig.layout.meta["baseline"] == v.baseline and b.axis in fig.layout.yaxis.title.text
    # the closest plan the verdict names is the one marked, at its same-budget figure
    closest = next(t for t in fig.data if t.name == "closest speculative plan")
    assert closest.y[0] == v.score(v.best_speculative) and closest.x[0] == v.best_speculative.plan.exit_layer

    top = tables.top_plans(table, b)
    assert list(top.columns[:3]) == ["plan", "× AR on all 2 cores", "× AR on one thread"]
    assert top["× AR on all 2 cores"].is_monotonic_decreasing and top["90% interval"].map(type).eq(str).all()

    comp = tables.heads_by_verdict(by_head, v, b, profile)
    assert set(comp["head"]) == set(by_head)
    assert max(_plan_values(charts.heads_bars(comp, b))) <= 1.0
    mode = v.best_speculative.plan.mode.name
    mine = comp[comp["head"] == head].iloc[0]
    assert mine[f"best {mode}"] == answer.short_label(v.best_speculative.plan.label())
    assert mine[f"{mode} × AR on all 2 cores"] == pytest.approx(v.score(v.best_speculative))
    assert comp[f"{mode} × AR on all 2 cores"].max() == pytest.approx(v.score(v.best_speculative))


def test_the_headline_and_the_star_are_the_verdicts_plan(default_swept, batch_swept):
    """What to run, how much faster, against what: the verdict's plan and figure; on a same-budget win the
    star is the recommendation, above the baseline, and its tokens/s stand in the ratio of its speedup."""
    _, _, keep = default_swept
    line = answer.headline(keep)
    assert line.startswith(f"**Run plain {keep.baseline}**") and f"**{keep.score(keep.best_speculative):.2f}×**" in line
    _, _, win = batch_swept
    assert win.outcome is Outcome.WIN and win.same_budget, win.text
    rec = win.recommended
    assert answer.headline(win).startswith(f"**Run {answer.short_label(rec.plan.label())}**: **{win.score(rec):.2f}×**")
    star = answer.marker(win, rec.plan.exit_head)
    assert star["speedup"] == win.score(rec) > 1.0 + win.band.rel and star["exit_layer"] == rec.plan.exit_layer
    assert star["tokens_per_s"] / win.baseline_tokens_per_s == pytest.approx(star["speedup"], rel=1e-9)
    assert answer.marker(win, "another head")["exit_layer"] is None  # not drawn on another head's chart


def test_batch_section_prices_ppsd_plan_batch_heads_and_matches_its_json(batch_swept, capsys):
    """The What-if batch table is `ppsd plan --batch 4 --json`'s plans (the same heads, γ and order); where the
    verdict's plan drafts with a head timed one sequence at a time, the section says so in one line."""
    from ppsd.cli import main

    assert main(["plan", "--profile", str(BATCH_PROFILE), "--batch", "4", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    ours = batch.ranked_points(str(BATCH_PROFILE), 0.0, 4)
    assert [(p["plan"], p["exit_head"]) for p in ours] == [(p["plan"], p["exit_head"]) for p in cli["plans"]]
    assert [p["speedup_vs_ar"] for p in ours] == pytest.approx([p["speedup_vs_ar"] for p in cli["plans"]])
    assert {p["exit_head"] for p in cli["plans"]} == set(batch.heads(sweep_cache.profile(str(BATCH_PROFILE), 0.0)))
    for scheme in ("eesd", "ppsd"):  # the Overview's best plan at each batch size: the CLI's curve
        assert [(p["batch"], p["plan"]) for p in batch.curve(str(BATCH_PROFILE), 0.0, scheme)] == \
            [(p["batch"], p["plan"]) for p in cli["curve"][scheme]]
    shown = batch.ranked_table(ours)
    assert list(shown["plan"]) == [p["plan"] for p in cli["plans"][: batch.TOP]]
    assert "trained" in set(shown["exit head"])  # the trained head's plans the table used to leave out
    profile, _, v = batch_swept
    note = batch.head_note(profile, v)
    assert v.recommended.plan.exit_head not in batch.heads(profile)
    assert v.recommended.plan.exit_head in note and "\n" not in note and "ppsd plan --batch" in note
    curve = pd.DataFrame([{"batch size": 1, "best EESD plan": "a", "EESD ×": 0.8, "best PPSD plan": "b", "PPSD ×": 0.9},
                          {"batch size": 2, "best EESD plan": "a", "EESD ×": 0.7, "best PPSD plan": "b", "PPSD ×": 0.8}])
    fig = charts.batch_curves(curve, batch.BASELINE)
    assert fig.layout.height >= 300 and any(s.y0 == s.y1 == 1.0 for s in fig.layout.shapes)  # AR = 1× drawn


def test_validation_opens_on_the_greedy_out_of_sample_run_with_its_key_columns_first():
    """On the committed profile the page opens on the greedy out-of-sample validation the README quotes, not a
    sampled one made later; its table leads with plan, predicted, measured, error and interval, and a row
    without a figure reads a word, never None."""
    created = json.loads((EXAMPLE / "profile.json").read_text())["created"]
    order = data.validation_order(data.find_validations([EXAMPLES_DIR]), EXAMPLE, created, [EXAMPLES_DIR])
    first = order[0]
    assert first.path == EXAMPLES_DIR / "smollm2-135m-cpu-oos-validation-unseen"
    assert not first.sampled and first.out_of_sample
    readme = (PROJECT_ROOT / "README.md").read_text()
    assert f"examples/{first.path.name}/NOTE.md" in readme  # the run the README quotes
    assert any(i.sampled for i in order if data.belongs_to(i, EXAMPLE, [EXAMPLES_DIR]))  # sampled runs come later
    for folder in (first.path, EXAMPLES_DIR / "smollm2-135m-cpu-sampled-validation-unseen" / "T1.0"):
        view, formats = tables.validation_view(data.load_validation(folder).rows)
        assert list(view.columns[:5]) == ["plan", "predicted ×", "measured ×", "error", "90% interval"]
        html = tables.worded(view, formats).to_html()
        assert not re.search(r">\s*(None|nan|NaN)\s*<", html), folder
        assert not [c for c in view.columns if re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", c)]  # no raw column names
    assert set(view["same output as AR"]) == {"the reference", "not judged (sampled)"}


def test_acceptance_only_folders_are_offered_only_under_acceptance_from():
    """`ppsd profile --skip-latency` folders (examples/*/measured-traces) are never a profile to plan on, and
    each is a source of acceptance for the measured profile of the same model."""
    found = {data.display_name(p, [EXAMPLES_DIR]): str(p) for p in data.find_profiles([EXAMPLES_DIR])}
    metas = {p: json.loads((Path(p) / "profile.json").read_text()) for p in found.values()}
    offered = data.plannable(found, metas)
    traces = [label for label in found if label.endswith("measured-traces")]
    assert traces and not set(traces) & set(offered)
    assert set(found) - set(offered) == set(traces)
    assert "examples/smollm2-135m-cpu" in offered
    from dashboard import ui

    sources = ui.acceptance_sources(str(EXAMPLE), found)
    assert set(traces) <= set(sources)


def test_one_alpha_per_plan(default_swept):
    """The α the verdict quotes for its best speculative plan is the one its break-even is priced at, the one the
    plan tables show and the one the exit-head table shows for it."""
    profile, by_head, v = default_swept
    spec = v.best_speculative
    a = plan_alpha(spec)
    assert f"α={a:.2f}" in v.text and v.break_even.priced == a
    head = spec.plan.exit_head
    row = tables.results_table([spec]).iloc[0]
    assert row["alpha"] == a
    comp = tables.heads_by_verdict(by_head, v, answer.basis(v), profile)
    assert comp.loc[comp["head"] == head, f"{spec.plan.mode.name} α"].iloc[0] == a


def test_plain_words(default_swept):
    """The words the pages use for the verdict: the noise band without its floor or doubt, the glossary's four
    terms, and no jargon in either."""
    _, _, v = default_swept
    band = answer.band_words(v)
    assert f"±{v.band.rel:.1%}" in band and not answer.jargon_in(band)
    assert set(answer.GLOSSARY) == {"same budget", "noise band", "acceptance α", "break-even"}
    assert not answer.jargon_in(answer.glossary_markdown() + answer.headline(v))
    assert answer.jargon_in("the stale pass of a closed form") == ["closed form", "stale pass"]
