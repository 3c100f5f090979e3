"""Under traffic: latency percentiles against the request rate per speculation policy, with 90% intervals, where
each policy stops beating plain decoding, and the policy to serve with at a chosen load and SLO (the serving
simulator, sim/serve/; the same answer as `ppsd plan --rate`)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import cached, traffic, ui
from sim.serve.metrics import Slo
from sim.serve.sweep import ar_capacity
from sim.serve.scheduler import SchedulerConfig
from sim.serve.workload import profile_prompts

profile = ui.require_profile()
path = ui.selected_path()
ui.page_header("Under traffic", profile,
               "Requests arrive at a rate and share a continuously batched engine. Speculation that pays for one "
               "sequence can hurt when the batch is full: this page shows where, and what to serve with.")

if not profile.batch.measured:
    st.info(f"This profile answers for one sequence at a time. `ppsd profile add-batch {profile.path}` measures "
            "passes of several sequences; this page then predicts latency under traffic.")
    st.stop()


@st.cache_data(show_spinner=False, max_entries=16)
def _capacity(path: str, stamp: float, max_batch: int) -> float:
    from dashboard.sweep_cache import profile as load

    p = load(path, stamp)
    return ar_capacity(p, profile_prompts(p), SchedulerConfig(max_batch=max_batch))


@st.cache_resource(show_spinner=False, max_entries=16)  # shared, not copied: it holds every request's timing
def _view(path: str, stamp: float, rate: float, slo: str, max_batch: int, num_prompts: int, replications: int):
    from dashboard.sweep_cache import profile as load

    return traffic.traffic_data(load(path, stamp), rate, Slo.parse(slo) if slo else None, max_batch, num_prompts,
                                replications)


stamp = cached.mtime(path)
sizes = list(profile.batch.sizes)
c = st.columns(5)
max_batch = c[0].selectbox("max batch", sizes, index=len(sizes) - 1, key="tr_batch",
                           help="Most sequences decoding at once (vLLM's --max-num-seqs): the batch sizes the profile "
                                "measured.")
capacity = _capacity(path, stamp, int(max_batch))
rate = c[1].number_input("request rate (req/s)", min_value=0.001, value=float(f"{capacity / 2:.3g}"), format="%.3g",
                         key="tr_rate", help=f"The load to recommend for. AR's capacity here: {capacity:.3g} req/s.")
ttft = c[2].number_input("SLO: TTFT (ms, 0 = none)", min_value=0.0, value=0.0, key="tr_ttft")
tpot = c[3].number_input("SLO: TPOT (ms, 0 = none)", min_value=0.0, value=0.0, key="tr_tpot")
figure = c[4].selectbox("latency", list(traffic.FIGURES), format_func=traffic.FIGURES.get, key="tr_figure")
with st.expander("simulation size"):
    num_prompts = st.slider("requests per rate", 20, 400, 60, 20, key="tr_requests")
    replications = st.slider("replications (intervals)", 2, 40, 5, key="tr_reps")
slo = ",".join(f"{k}:{v:g}" for k, v in (("ttft", ttft), ("tpot", tpot)) if v > 0)

with st.spinner("Simulating the load sweep…"):
    view = _view(path, stamp, float(rate), slo, int(max_batch), int(num_prompts), int(replications))

st.subheader("Recommendation")
for line in view.words[:1]:
    st.success(line)
st.code("\n".join(view.plan.config_lines()), language="text")
st.plotly_chart(traffic.load_chart(view, figure), key="chart_traffic")
st.caption(f"Each point: {num_prompts} Poisson requests of the profile's prompts, max batch {max_batch}, prefill "
           f"first; bands: 90% intervals from {replications} replications (each prompt's acceptance drawn from its "
           "category's traced prompts, the profile's cost doubt). Dashed lines: where a policy stops beating AR on "
           "TPOT; the grey line: the chosen rate.")
for line in view.words[1:]:
    st.write(line)
st.dataframe(pd.DataFrame([r.to_json_dict() for r in view.plan.rows]), hide_index=True)
