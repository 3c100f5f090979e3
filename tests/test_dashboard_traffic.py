"""The dashboard's "Under traffic" page: its data (a load sweep, the crossovers, the plan at the chosen load) and
the page itself through Streamlit's AppTest (no browser)."""

from __future__ import annotations

import os

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import data, traffic
from ppsd.paths import EXAMPLES_DIR, PROJECT_ROOT
from serve_fixtures import write_serving_profile
from sim.serve.metrics import Slo

APP = str(PROJECT_ROOT / "dashboard" / "app.py")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    out = tmp_path_factory.mktemp("traffic")
    write_serving_profile(out / "examples" / "serving")
    return out


def test_traffic_data_sweeps_the_drawn_policies_and_recommends_at_the_chosen_load(root):
    from ppsd.profile import load_profile

    profile = load_profile(root / "examples" / "serving")
    view = traffic.traffic_data(profile, 2.0, Slo.parse("tpot:30"), num_prompts=20, replications=2)
    assert sorted(p.split(":")[0] for p in view.rows["policy"].unique()) == ["ar", "eesd", "goodput", "ppsd"]
    assert len(view.rows) == 4 * len(view.sweep.rates) * len(traffic.FIGURES)
    assert (view.rows["lo"] <= view.rows["point"]).all() and (view.rows["point"] <= view.rows["hi"]).all()
    assert view.words[0].startswith("At 2 requests a second under the SLO tpot:30")
    assert view.plan.chosen.policy.spec() in view.words[0] or "without speculation" in view.words[0]
    assert any("TPOT" in w for w in view.words[1:])
    fig = traffic.load_chart(view, "tpot_p99_ms").to_dict()
    names = [t.get("name", "") for t in fig["data"]]
    assert "ar" in names and any(n.startswith("90% interval of") for n in names)
    assert fig["layout"]["xaxis"]["type"] == "log"


def _app(monkeypatch, roots, label):
    monkeypatch.setenv(data.DATA_DIRS_ENV, os.pathsep.join(map(str, roots)))
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["profile_path"] = label
    at.session_state["tr_requests"] = 20
    at.session_state["tr_reps"] = 2
    return at.switch_page("views/traffic.py").run()  # (straight to the page: the Overview's sweep is not needed)


def test_the_traffic_page_renders_its_chart_and_recommendation(monkeypatch, root):
    at = _app(monkeypatch, [root / "examples"], "examples/serving")
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert any("chart_traffic" in el.proto.id for el in at.get("plotly_chart"))
    assert at.success and at.success[0].value.startswith("At ")
    assert "ppsd serve --policy" in at.code[0].value


def test_the_traffic_page_names_add_batch_for_a_profile_without_batch_tables(monkeypatch):
    at = _app(monkeypatch, [EXAMPLES_DIR], "examples/smollm2-135m-cpu")
    assert not at.exception
    assert any("ppsd profile add-batch" in i.value for i in at.info)
