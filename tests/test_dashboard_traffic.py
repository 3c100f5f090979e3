"""The dashboard's "Under traffic" page: its recommendation is `ppsd plan --rate`'s on the committed batch profile,
printed as the command prints it; its load curves carry intervals and mark where a policy stops beating AR; it
speaks plain words; and it opens serving validation folders (`ppsd validate --serve`): predicted against measured
per policy and load with the interval, the error and whether every output matched AR's. Data functions directly,
the page through Streamlit's AppTest (no browser; tests/test_dashboard_browser.py draws it in Chromium)."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import answer, data, sweep_cache, traffic
from dashboard import serve_validation as sv
from dashboard_fixtures import make_serve_validation
from ppsd.errors import UserError
from ppsd.paths import EXAMPLES_DIR, PROJECT_ROOT
from serve_fixtures import write_serving_profile
from sim.serve.cli import strict
from sim.serve.metrics import Slo
from sim.serve.planner import PLAN_REQUESTS

APP = str(PROJECT_ROOT / "dashboard" / "app.py")
BATCH_PROFILE = EXAMPLES_DIR / "smollm2-135m-batch-amd-epyc" / "profile"
POLICIES = "ar;eesd:2:3;goodput:2"  # on the serving fixture profile (its exit layer: serve_fixtures.EXIT)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    out = tmp_path_factory.mktemp("traffic")
    write_serving_profile(out / "examples" / "serving")
    make_serve_validation(out / "runs", out / "examples" / "serving", policies=POLICIES, mismatched="eesd:2:3")
    return out


@pytest.fixture(scope="module")
def view(root):
    from ppsd.profile import load_profile

    return traffic.traffic_data(load_profile(root / "examples" / "serving"), 2.0, num_prompts=20, replications=2)


def _cli(*args: str) -> str:
    from ppsd.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return out.getvalue()


@pytest.mark.parametrize("slo", [None, "tpot:100"])
def test_the_pages_recommendation_is_ppsd_plan_rates_on_the_committed_batch_profile(slo):
    profile = sweep_cache.profile(str(BATCH_PROFILE), 0.0)  # as the page loads it
    plan = traffic.traffic_plan(profile, 0.3, Slo.parse(slo) if slo else None)
    flags = ["plan", "--profile", str(BATCH_PROFILE), "--rate", "0.3"] + (["--slo", slo] if slo else [])
    assert json.loads(json.dumps(strict(plan.to_json_dict()))) == json.loads(_cli(*flags, "--json"))
    printed = _cli(*flags).splitlines()
    for line in plan.chosen_lines():  # the page's code block, line for line what the command prints
        assert line in printed, line
    assert any(line.strip().startswith("ppsd serve --policy") for line in plan.chosen_lines())


def test_policies_read_as_the_other_pages_name_plans():
    words = {spec: traffic.policy_words(spec) for spec in
             ("ar", "eesd:29:1", "ppsd:15", "off-above:29:1:2", "table:29:1=3,2=1,4=0", "goodput:29:8")}
    assert words == {"ar": "AR (no speculation)", "eesd:29:1": "EESD E=29 γ=1", "ppsd:15": "PPSD E=15 k=2",
                     "off-above:29:1:2": "EESD E=29 γ=1 up to 2 at once, AR above",
                     "table:29:1=3,2=1,4=0": "EESD E=29, γ by batch size (1: γ 3, 2–3: γ 1, 4+: off)",
                     "goodput:29:8": "EESD E=29, adaptive γ ≤ 8"}
    assert traffic.latency(float("nan")) == "none finished" and traffic.latency(57795.0) == "57.8 s"


def test_the_load_chart_draws_intervals_and_marks_where_a_policy_stops_beating_ar(view):
    assert sorted(p.split(":")[0] for p in view.rows["policy"].unique()) == ["ar", "eesd", "goodput", "ppsd"]
    assert len(view.rows) == 4 * len(view.sweep.rates) * len(traffic.FIGURES)
    assert (view.rows["lo"] <= view.rows["point"]).all() and (view.rows["point"] <= view.rows["hi"]).all()
    crossing = {s: c["tpot_p50_ms"] for s, c in view.sweep.crossovers.items() if c["tpot_p50_ms"].status == "crosses"}
    assert crossing, "the serving fixture's EESD plan pays for one sequence and not for eight"
    fig = traffic.load_chart(view, "tpot_p50_ms")
    names = [t.name for t in fig.data]
    assert "AR (no speculation)" in names and sum(n.startswith("90% interval of") for n in names) == 4
    for spec, cross in crossing.items():
        mark = next(t for t in fig.data if t.name == f"{traffic.policy_words(spec)} stops beating AR")
        assert mark.x[0] == pytest.approx(cross.rate) and mark.meta == "crossover"
        assert any(s.type == "rect" and s.x0 <= cross.rate <= s.x1 for s in fig.layout.shapes)  # its interval
    assert any(s.type == "line" and s.x0 == view.plan.rate for s in fig.layout.shapes)  # the load asked about
    note = next(a for a in fig.layout.annotations if a.text == "the load asked about")
    assert 10 ** note.x == pytest.approx(view.plan.rate)  # (on a log axis, annotations are placed in log10)
    assert fig.layout.xaxis.type == "log"
    thick = [t for t in fig.data if t.line and t.line.width == 4]
    assert [t.name for t in thick] == [traffic.policy_words(view.chosen) + " · recommended"]
    lines = traffic.crossover_words(view.sweep)
    assert len(lines) == 3 and any("stops beating AR at" in w for w in lines)
    assert not any(answer.jargon_in(w) or ":" in w.split(": ", 1)[1] for w in lines), lines


def test_at_the_load_asked_about_the_curves_pass_through_the_rankings_figures(root):
    from ppsd.profile import load_profile

    view = traffic.traffic_data(load_profile(root / "examples" / "serving"), 1.3, replications=2)
    assert traffic.SWEEP_REQUESTS == PLAN_REQUESTS and 1.3 in view.sweep.rates
    at = view.rows[(view.rows["rate"] == 1.3) & (view.rows["figure"] == "tpot_p50_ms")].set_index("policy")["point"]
    for row in view.plan.rows:
        if row.policy.spec() in at.index:
            assert at[row.policy.spec()] == pytest.approx(row.run.headline["tpot_p50_ms"]), row.policy.spec()
    assert view.chosen in at.index


def test_the_first_lines_answer_which_policy_and_its_latency_against_ar(view):
    plan = view.plan
    line = traffic.headline(plan)
    assert line.startswith(f"**Serve with {traffic.policy_words(plan.chosen.policy.spec())}** at 2 requests a second")
    assert ("against AR's" in line) != (plan.chosen.policy.spec() == "ar")
    cards = traffic.cards(plan)
    assert [c.label for c in cards] == ["median TPOT", "median TTFT", "median end to end", "p99 TPOT"]
    assert all(len(c.value) <= 8 and (c.delta or "").startswith("AR: ") == (plan.chosen.policy.spec() != "ar")
               for c in cards)
    table, formats = traffic.plan_table(plan)
    assert table["policy"].iloc[0] == traffic.policy_words(plan.chosen.policy.spec())
    assert not answer.jargon_in(" ".join([line, *table.columns, *(c.label for c in cards)]))


def test_under_an_slo_the_first_lines_lead_with_goodput(root):
    from ppsd.profile import load_profile

    plan = traffic.traffic_plan(load_profile(root / "examples" / "serving"), 2.0, Slo.parse("ttft:60,tpot:8"))
    line = traffic.headline(plan)
    assert "at 2 requests a second under the SLO TTFT ≤ 60 ms, TPOT ≤ 8 ms" in line
    assert plan.chosen.policy.spec() == "ar" or "of requests meeting the SLO against AR's" in line
    cards = traffic.cards(plan)
    assert [c.label for c in cards] == ["goodput (req/s)", "median TPOT", "median TTFT", "median end to end"]
    table, _ = traffic.plan_table(plan)
    assert list(table.columns[:2]) == ["policy", "goodput (req/s)"]


def test_serve_validation_folders_are_found_read_and_shown_predicted_against_measured(root):
    folders = data.find_serve_validations([root / "examples", root / "runs"])
    assert [f.name for f in folders] == ["serve-validation"]
    v = sv.read(folders[0])
    assert len(v.rows) == 3 * 3 and v.meta["out_of_sample"]  # 3 policies × (2 Poisson loads and a trace window)
    shown, formats = sv.table(v, "tpot_p99_ms")
    assert list(shown.columns[:5]) == ["policy", "load", "predicted (ms)", "measured (ms)", "error"]
    assert list(shown["measured (ms)"]) == list(v.rows["measured_tpot_p99_ms"])
    eesd = shown[shown["policy"] == "EESD E=2 γ=3"]
    assert set(eesd["same output as AR"]) == {"NO: 2 differ"}
    assert set(shown.loc[shown["policy"] != "EESD E=2 γ=3", "same output as AR"]) == {"yes, all"}
    assert {"Poisson", "trace"} == {x.rsplit(",", 1)[0] for x in shown["load"]}
    assert shown["90% interval (ms)"].str.fullmatch(r"[\d.]+–[\d.]+, (holds|misses) it").all()
    s = sv.summary(v, "tpot_p99_ms")
    assert (s.matched, s.judged, s.out_of_sample) == (6, 9, True) and 0 <= s.coverage <= 1
    errors, _ = sv.errors_table(v)
    assert list(errors.columns[2:]) == [traffic.FIGURES[x] for x in sv.HEADLINE]
    fig = sv.chart(v, "tpot_p99_ms")
    measured = [t for t in fig.data if t.meta == "measured"]
    assert len(measured) == 3 and all(t.marker.symbol == "diamond" for t in measured)
    ar = v.rows[v.rows["policy"] == "ar"].sort_values("rate")
    got = next(t for t in measured if t.name == "AR (no speculation) measured")
    assert list(got.y) == list(ar["measured_tpot_p99_ms"])
    curve = next(t for t in fig.data if t.name == "AR (no speculation)")  # the Poisson loads; the trace apart
    poisson = ar[ar["load"].str.startswith("poisson")]
    assert list(curve.x) == list(poisson["rate"]) and list(curve.y) == list(poisson["predicted_tpot_p99_ms"])
    window = next(t for t in fig.data if t.name == "AR (no speculation), trace window")
    assert window.error_y.array[0] >= 0 and window.error_y.arrayminus[0] >= 0
    assert sum(t.name.startswith("90% interval of") for t in fig.data) == 3
    assert [t.name for t in fig.data if t.showlegend is not False] == [
        traffic.policy_words(p) for p in POLICIES.split(";")]  # one legend entry per policy
    text = " ".join([sv.facts_line(v), *shown.columns, *errors.columns, *(t.name for t in fig.data)])
    assert not answer.jargon_in(text) and str(root) not in text


def test_the_selected_profiles_validation_comes_first_and_a_broken_one_says_so_in_one_line(root, tmp_path):
    other = make_serve_validation(tmp_path, root / "examples" / "serving", "other", policies="ar;eesd:2:3")
    doc = json.loads((other / "serve_validation.json").read_text())
    doc.update(profile="elsewhere/profile", created="2099-01-01T00:00:00+00:00")
    (other / "serve_validation.json").write_text(json.dumps(doc))
    mine = root / "runs" / "serve-validation"
    got = sv.order([other, mine], str(root / "examples" / "serving"), "synthetic-serving", [root / "runs", tmp_path])
    assert got == [(mine, True), (other, False)]
    (other / "serve_validation.json").write_text(json.dumps({**doc, "schema_version": 7}))
    with pytest.raises(UserError) as err:
        sv.read(other)
    assert "schema version 7" in str(err.value) and "validate --serve" in err.value.one_line()


def _app(monkeypatch, roots, label, page="views/traffic.py"):
    monkeypatch.setenv(data.DATA_DIRS_ENV, os.pathsep.join(map(str, roots)))
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["profile_path"] = label
    at.session_state["tr_requests"] = 20
    at.session_state["tr_reps"] = 2
    return at.switch_page(page).run()  # (straight to the page: the Overview's sweep is not needed)


def test_the_traffic_page_answers_first_and_opens_the_serving_validation(monkeypatch, root):
    at = _app(monkeypatch, [root / "examples", root / "runs"], "examples/serving")
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    charts = [el.proto.id for el in at.get("plotly_chart")]
    assert any("chart_traffic-" in c or c.endswith("chart_traffic") for c in charts)
    assert any("chart_traffic_validation" in c for c in charts)
    assert at.markdown[1].value.startswith("#### **Serve with ")  # right under the page's model line
    assert "ppsd serve --policy" in at.code[0].value
    assert [m.label for m in at.metric][4:] == ["intervals hold", "median TPOT error", "same output as AR", "prompts"]
    assert at.metric[6].value == "6 / 9"
    shown = " ".join([*(m.value for m in at.markdown), *(c.value for c in at.caption), *(m.label for m in at.metric),
                      *(m.value for m in at.metric)])
    assert not answer.jargon_in(shown), answer.jargon_in(shown)
    assert "None" not in shown.split() and "nan" not in shown.split() and str(root) not in shown


def test_the_traffic_page_names_add_batch_for_a_profile_without_batch_tables(monkeypatch):
    at = _app(monkeypatch, [EXAMPLES_DIR], "examples/smollm2-135m-cpu")
    assert not at.exception
    line = next(i.value for i in at.info if "ppsd profile add-batch" in i.value)
    assert "add-batch examples/smollm2-135m-cpu`" in line and str(EXAMPLES_DIR) not in line


def test_the_validation_page_points_to_under_traffic(monkeypatch, root):
    at = _app(monkeypatch, [root / "examples", root / "runs"], "examples/serving", "views/validation.py")
    assert not at.exception
    links = [el.proto.label for el in at.get("page_link")]
    assert any("ppsd validate --serve" in x and "Under traffic" in x for x in links), links


def test_an_error_names_the_folder_as_the_sidebar_does(monkeypatch, tmp_path):
    from ppsd.profile.synthetic import write_synthetic_profile

    write_synthetic_profile(tmp_path / "examples" / "nogen", alpha_by_exit=lambda e: 0.8, num_layers=8, layer_ms=1.0,
                            head_ms=1.0, batch_free_tokens=4)  # batch tables, but no generations to draw prompts from
    at = _app(monkeypatch, [tmp_path / "examples"], "examples/nogen")
    assert not at.exception
    assert [e.value for e in at.error] == ["profile examples/nogen recorded no generations to take prompts from; give a "
                                           "profile made by `ppsd profile` with acceptance traces"]
    assert data.relative_paths(f"see {PROJECT_ROOT}/runs/x and {tmp_path}/y", [tmp_path / "examples"]) == "see runs/x and y"


def test_the_traffic_page_ranks_by_goodput_under_an_slo(monkeypatch, root):
    monkeypatch.setenv(data.DATA_DIRS_ENV, os.pathsep.join(map(str, [root / "examples"])))
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["profile_path"] = "examples/serving"
    for key, value in (("tr_requests", 20), ("tr_reps", 2), ("tr_tpot", 8.0), ("tr_rate", 2.0)):
        at.session_state[key] = value
    at = at.switch_page("views/traffic.py").run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert "under the SLO TPOT ≤ 8 ms" in at.markdown[1].value and at.metric[0].label == "goodput (req/s)"
    assert "--slo tpot:8" in " ".join(c.value for c in at.caption)
