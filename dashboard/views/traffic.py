"""Under traffic: which speculation policy to serve with at a load and SLO and its latency against AR's (the answer
`ppsd plan --rate` prints), latency percentiles against the request rate per policy with 90% intervals and where
each stops beating plain decoding (the serving simulator, sim/serve/), and the serving validations
(`ppsd validate --serve`) measured on the real loop against those predictions."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from dashboard import answer, cached, data, tables, traffic, ui
from dashboard import serve_validation as sv
from sim.serve.metrics import Slo
from sim.serve.scheduler import SchedulerConfig
from sim.serve.sweep import ar_capacity
from sim.serve.workload import profile_prompts

profile = ui.require_profile()
path = ui.selected_path()
ui.page_header("Under traffic", profile,
               "Requests arrive at a rate and share a continuously batched engine. Speculation that pays for one "
               "sequence can hurt when the batch is full: this page says what to serve with at your load.")

if not profile.batch.measured:
    st.info(f"This profile answers for one sequence at a time. `ppsd profile add-batch "
            f"{data.display_name(Path(ui.selected_base_path() or profile.path))}` measures passes of several sequences; this page then predicts "
            "latency under traffic.")
    st.stop()


@st.cache_data(show_spinner=False, max_entries=16)
def _capacity(path: str, stamp: float, max_batch: int) -> float:
    from dashboard.sweep_cache import profile as load

    p = load(path, stamp)
    return ar_capacity(p, profile_prompts(p), SchedulerConfig(max_batch=max_batch))


@st.cache_resource(show_spinner=False, max_entries=32)  # shared, not copied: it holds every request's timing
def _plan(path: str, stamp: float, rate: float, slo: str, max_batch: int):
    from dashboard.sweep_cache import profile as load

    return traffic.traffic_plan(load(path, stamp), rate, Slo.parse(slo) if slo else None, max_batch)


@st.cache_resource(show_spinner=False, max_entries=16)
def _sweep(path: str, stamp: float, specs: tuple[str, ...], max_batch: int, rate: float, num_prompts: int,
           replications: int):
    from dashboard.sweep_cache import profile as load

    return traffic.traffic_sweep(load(path, stamp), list(specs), max_batch, rate, num_prompts, replications)


@st.cache_data(show_spinner=False, max_entries=16)
def _drawn(path: str, stamp: float, max_batch: int, chosen: str) -> tuple[str, ...]:
    from dashboard.sweep_cache import profile as load

    return tuple(traffic.drawn_policies(load(path, stamp), max_batch, chosen))


stamp = cached.mtime(path)
sizes = list(profile.batch.sizes)
c = st.columns(5)
max_batch = c[0].selectbox("max batch", sizes, index=len(sizes) - 1, key="tr_batch",
                           help="Max batch: " + answer.TRAFFIC_GLOSSARY["max batch"] + " (vLLM's --max-num-seqs; the "
                                "batch sizes the profile measured).")
capacity = _capacity(path, stamp, int(max_batch))
rate = c[1].number_input("requests a second", min_value=0.001, value=float(f"{capacity / 2:.3g}"), format="%.3g",
                         key="tr_rate", help=f"The load to recommend for (Poisson arrivals of the profile's prompts). "
                                             f"AR serves at most about {capacity:.3g} a second here.")
ttft = c[2].number_input("SLO: TTFT (ms)", min_value=0.0, value=0.0, key="tr_ttft", help="0: no SLO on it. TTFT: "
                         + answer.TRAFFIC_GLOSSARY["TTFT"])
tpot = c[3].number_input("SLO: TPOT (ms)", min_value=0.0, value=0.0, key="tr_tpot", help="0: no SLO on it. TPOT: "
                         + answer.TRAFFIC_GLOSSARY["TPOT"])
figure = c[4].selectbox("latency", list(traffic.FIGURES), format_func=traffic.FIGURES.get, key="tr_figure")
slo = ",".join(f"{k}:{v:g}" for k, v in (("ttft", ttft), ("tpot", tpot)) if v > 0)

# --- the first screen: which policy at this load and SLO, and its latency against AR's -------------------
with st.spinner("Ranking the policies at this load…"):
    plan = _plan(path, stamp, float(rate), slo, int(max_batch))
st.markdown("#### " + traffic.headline(plan))
m = st.columns(4)
for slot, card in zip(m, traffic.cards(plan)):
    slot.metric(card.label, card.value, card.delta, delta_color="off", delta_arrow="off", help=card.help)
st.code("\n".join(plan.chosen_lines()), language="text", wrap_lines=True)
source = st.session_state.get(ui.ACCEPTANCE_KEY)
st.caption(f"As `ppsd plan --profile {data.display_name(Path(ui.selected_base_path() or path))} --rate {rate:g}"
           + (f" --slo {slo}" if slo else "") + f" --max-batch {max_batch}"
           + (f" --acceptance-from {source}" if source and source != ui.OWN_PROMPTS else "") + "` prints it: "
           + "; ".join(plan.notes) + ". Drafts with the model's own LM head (the head timed at every batch size).")

with st.expander("simulation size of the curves"):
    num_prompts = st.slider("requests per load", 20, 400, traffic.SWEEP_REQUESTS, 20, key="tr_requests",
                            help=f"{traffic.SWEEP_REQUESTS}: as many as the ranking above simulates, so the curves pass "
                                 "through its figures at the load asked about.")
    replications = st.slider("replications (intervals)", 2, 40, traffic.SWEEP_REPLICATIONS, key="tr_reps")
with st.spinner("Simulating the load sweep…"):
    sweep = _sweep(path, stamp, _drawn(path, stamp, int(max_batch), plan.chosen.policy.spec()), int(max_batch),
                   float(rate), int(num_prompts), int(replications))
view = traffic.traffic_view(sweep, plan)
st.plotly_chart(traffic.load_chart(view, figure), key="chart_traffic")
st.caption(f"Each point: {num_prompts} requests of the profile's prompts arriving at random (Poisson), max batch "
           f"{max_batch}, prompts read before decoding; bands: 90% intervals from {replications} replications (each "
           "prompt's acceptance drawn from prompts of its kind, the profile's timing doubt). A cross and a dashed line: "
           "where a policy stops beating AR on TPOT, its 90% interval shaded; the grey line: the load asked about; "
           "the thick curve: the recommendation.")
for line in traffic.crossover_words(sweep):
    st.write(line)

st.subheader("Every policy at this load")
ranked, formats = traffic.plan_table(plan)
st.dataframe(tables.worded(ranked, formats), hide_index=True, width="stretch", key="table_traffic")
st.caption("Best first, ranked as `ppsd plan --rate` ranks them: " + (
    "by goodput under the SLO, then median end to end." if slo else "by median end to end.")
           + " The last column is what `ppsd serve --policy` takes.")

with st.expander("What the words mean: " + ", ".join(answer.TRAFFIC_GLOSSARY)):
    st.markdown(answer.glossary_markdown(answer.TRAFFIC_GLOSSARY))

# --- the real loop against these predictions ------------------------------------------------------------
st.subheader("Checked on the real serving loop")
with ui.guard("serving validation"):
    found = sv.order(data.find_serve_validations(), ui.selected_base_path(), profile.model_id)
    if not found:
        st.caption(f"No serving validation found yet. `ppsd validate --serve --profile "
                   f"{data.display_name(Path(ui.selected_base_path() or path))} --out runs/NAME` measures the real "
                   "serving loop against these predictions on prompts the profile never traced; its folder then "
                   "shows here.")
    else:
        labels = {data.display_name(p) + ("" if mine else " · another profile"): p for p, mine in found}
        pick = st.selectbox("serving validation", list(labels), key="tr_validation",
                            help="Folders holding serve_validation.json under the data roots, this profile's first.")
        v = sv.read(labels[pick])
        s = sv.summary(v, figure)
        k = st.columns(4)
        k[0].metric("intervals hold", "not computed" if s.coverage is None else f"{s.coverage:.0%}",
                    "of measured figures", delta_color="off", delta_arrow="off",
                    help="How many measured figures fell inside their prediction's 90% interval.")
        k[1].metric(f"{traffic.FIGURES[figure]} error", "not measured" if s.median_error_pct is None else
                    f"{s.median_error_pct:.1f}%", "median over the rows", delta_color="off", delta_arrow="off",
                    help="Predicted against measured, the median of its size over every (policy, load).")
        k[2].metric("same output as AR", f"{s.matched} / {s.judged}" if s.judged else "not checked", "runs",
                    delta_color="off", delta_arrow="off",
                    help="Runs whose every request wrote exactly the tokens AR writes alone for its prompt (lossless).")
        k[3].metric("prompts", "unseen" if s.out_of_sample else "seen before", "by the profile", delta_color="off",
                    delta_arrow="off", help="Unseen: measured on prompts the profile never traced (out of sample).")
        st.plotly_chart(sv.chart(v, figure), key="chart_traffic_validation")
        st.caption(f"The {traffic.FIGURES[figure]} of each policy at each load (pick another figure under "
                   "*latency* above):")
        shown, formats = sv.table(v, figure)
        st.dataframe(tables.worded(shown, formats), hide_index=True, width="stretch", key="table_traffic_validation")
        errors, formats = sv.errors_table(v)
        st.caption("Every figure's error, predicted against measured:")
        st.dataframe(tables.worded(errors, formats), hide_index=True, width="stretch", key="table_traffic_errors")
        st.caption(sv.facts_line(v) + " The curves are the simulator's predictions for the very arrivals the real "
                   "loop was sent (a trace window's, a square with its interval as a bar); the diamonds, what it "
                   "measured.")
