"""Streamlit helpers shared by the pages: the selected source, cached loading, page headers and
the error boundary that turns lower-layer errors into one-line messages."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import streamlit as st

from dashboard import answer, data, theme
from dashboard.tables import short_label
from ppsd.errors import UserError
from ppsd.profile import PROFILE_FILE, Profile, load_profile

log = logging.getLogger("ppsd.dashboard")

PROFILE_KEY = "profile_path"
UPLOADS_KEY = "uploaded_profiles"
ACCEPTANCE_KEY = "acceptance_from"
OWN_PROMPTS = "its own prompts"


@contextlib.contextmanager
def guard(what: str = ""):
    """Show a UserError as its one line (problem; fix) and anything unexpected as one line too;
    the traceback goes to the server log, never to the page, and folders are named as the sidebar
    names them (`data.relative_paths`). Streamlit's own stop/rerun signals
    derive from BaseException and pass through."""
    try:
        yield
    except UserError as exc:
        st.error(data.relative_paths(exc.one_line()))
    except Exception as exc:  # noqa: BLE001 - the page must not show a raw traceback
        log.exception("dashboard error%s", f" in {what}" if what else "")
        first = data.relative_paths(str(exc).splitlines()[0]) if str(exc) else ""
        st.error(f"{what + ': ' if what else ''}{exc.__class__.__name__}: {first} (details in the server log)")


@st.cache_resource(show_spinner=False, max_entries=16)
def _load(path: str, mtime: float) -> Profile:
    # keyed on mtime so a re-written profile folder is re-read
    return load_profile(path)


def load(path: str | Path) -> Profile:
    path = Path(path)
    file = path / PROFILE_FILE
    mtime = file.stat().st_mtime if file.exists() else 0.0
    return _load(str(path), mtime)


@st.cache_data(show_spinner=False, ttl=5)
def _discovered(roots: tuple[str, ...]) -> list[str]:
    # short ttl: a profile written by the *Profile a model* page appears within seconds; keyed on
    # the roots so changing $PPSD_DATA_DIRS is seen at once
    return [str(p) for p in data.find_profiles([Path(r) for r in roots])]


def discovered_profiles() -> list[str]:
    return _discovered(tuple(str(r) for r in data.data_roots()))


discovered_profiles.clear = _discovered.clear  # the Profile-a-model page clears it when a run ends


def found_sources() -> dict[str, str]:
    """{label: path} of every discovered profile folder, acceptance-only ones included: the reference profile,
    the rest of examples, then runs, then uploads."""
    found = {data.display_name(Path(p)): p for p in discovered_profiles()}
    opts = {label: found[label] for label in data.reference_first(list(found))}
    for label, p in (st.session_state.get(UPLOADS_KEY) or {}).items():
        opts[f"uploaded: {label}"] = p
    return opts


def source_options() -> dict[str, str]:
    """{label: path} of every selectable profile: those with latency tables (an acceptance-only folder,
    `ppsd profile --skip-latency`, is offered under *Acceptance from* only, `data.acceptance_only`)."""
    return data.plannable(found_sources(), profile_metas())


def sidebar_sources() -> None:
    """The sidebar's source picker, upload box and the selected source's facts."""
    with st.sidebar:
        st.subheader("Data source")
        upload = st.file_uploader("Upload a profile folder (.zip)", type=["zip"], key="upload_zip",
                                  help="A zip of a folder written by `ppsd profile --out DIR` (holding profile.json).")
        if upload is not None:
            with guard("upload"):
                path = data.extract_profile_zip(upload.getvalue(), upload.name)
                uploads = st.session_state.setdefault(UPLOADS_KEY, {})
                if upload.name not in uploads:
                    uploads[upload.name] = str(path)
                    st.session_state[PROFILE_KEY] = f"uploaded: {upload.name}"
        opts = source_options()
        if not opts:
            st.info("No profile folders yet. Put one under "
                    + " or ".join(f"`{r}`" for r in data.data_roots())
                    + ", upload a zip, or use *Profile a model*.")
            st.session_state.pop(PROFILE_KEY, None)
            return
        labels = list(opts)
        from_url(labels)
        if st.session_state.get(PROFILE_KEY) not in labels:
            st.session_state[PROFILE_KEY] = data.default_profile(labels)
        label = st.selectbox("Profile", labels, key=PROFILE_KEY,
                             help="Profile folders found under " + ", ".join(str(r) for r in data.data_roots())
                             + ", plus uploads. Folders holding acceptance only (`ppsd profile --skip-latency`) are "
                               "offered under *Acceptance from*.")
        sources = [OWN_PROMPTS, *acceptance_sources(opts[label], found_sources())]
        if st.session_state.get(ACCEPTANCE_KEY) not in sources:
            st.session_state[ACCEPTANCE_KEY] = OWN_PROMPTS
        st.selectbox("Acceptance from", sources, key=ACCEPTANCE_KEY,
                     help="Price this profile's latency for another profile's prompts: trace your own traffic with "
                          "`ppsd profile --prompts FILE --skip-latency --out DIR` and pick it here (the same as "
                          "`ppsd plan --profile P --acceptance-from DIR`).")
        with guard("profile"):
            show_source_facts(load(opts[label]), compact=True)


URL_PROFILE = "profile"  # ?profile=examples/NAME opens the dashboard on that profile (a link to share)


def from_url(labels: list[str]) -> None:
    """Select the profile a link names (`?profile=LABEL`) once per link, so the picker still moves after."""
    wanted = st.query_params.get(URL_PROFILE)
    if wanted and wanted in labels and st.session_state.get("_profile_from_url") != wanted:
        st.session_state[PROFILE_KEY] = wanted
        st.session_state["_profile_from_url"] = wanted


def selected_path() -> str | None:
    """The selected profile's folder; with another profile chosen as the acceptance source, a folder
    pricing it for that profile's prompts (`acceptance_view`)."""
    path = selected_base_path()
    source = found_sources().get(st.session_state.get(ACCEPTANCE_KEY) or "")
    return acceptance_view(path, source) if path and source and source != path else path


def selected_base_path() -> str | None:
    """The selected profile's own folder (whatever the acceptance source)."""
    label = st.session_state.get(PROFILE_KEY)
    return source_options().get(label) if label else None


@st.cache_data(show_spinner=False)
def _acceptance_view(base: str, source: str, stamps: tuple) -> str:
    import hashlib

    from ppsd.paths import cache_dir
    from ppsd.profile import write_acceptance_view

    name = hashlib.sha1(f"{base}|{source}|{stamps}".encode()).hexdigest()[:12]
    out = cache_dir() / "acceptance-views" / name
    write_acceptance_view(base, source, out)
    return str(out)


def acceptance_view(base: str, source: str) -> str | None:
    """A folder (in the cache) with `base`'s latency and `source`'s acceptance, as `ppsd plan --profile
    BASE --acceptance-from SOURCE` prices; None (and the one-line error) when the two do not fit."""
    stamps = tuple((Path(p) / PROFILE_FILE).stat().st_mtime for p in (base, source))
    try:
        return _acceptance_view(base, source, stamps)
    except UserError as exc:
        st.sidebar.error(exc.one_line())
        return base


def acceptance_sources(base: str, options: dict[str, str]) -> list[str]:
    """The labels of the profiles whose acceptance can price `base`: the same model, with traces."""
    try:
        model = load(base)
    except UserError:
        return []
    out = []
    for label, path in options.items():
        if path == base:
            continue
        with contextlib.suppress(UserError, OSError):
            other = load(path)
            if other.model_id == model.model_id and other.num_layers == model.num_layers and other.has_acceptance:
                out.append(label)
    return out


def current_profile() -> Profile | None:
    path = selected_path()
    if path is None:
        return None
    try:
        return load(path)
    except UserError as exc:
        st.error(exc.one_line())
        return None


def require_profile() -> Profile:
    """The selected profile, or an empty-state message and stop."""
    profile = current_profile()
    if profile is None:
        if selected_path() is None:
            st.info("No profile selected. Profile folders are read from "
                    + ", ".join(f"`{r}`" for r in data.data_roots())
                    + ". Create one on the *Profile a model* page or with "
                    "`ppsd profile --out runs/NAME`, or upload a zip in the sidebar.")
        st.stop()
    return profile


def show_source_facts(profile: Profile, compact: bool = False) -> None:
    facts = data.source_summary(profile.meta)
    if facts["kind"] == "estimated":
        st.badge("estimated", icon=":material/warning:", color="orange",
                 help="Latencies in this profile are estimated (synthetic or roofline), not measured on hardware.")
    else:
        st.badge("measured", icon=":material/check:", color="green",
                 help="Latencies in this profile were measured on the device named below.")
    text = (f"**Model** {facts['model']}  \n**Device** {facts['device']}  \n**Date** {facts['date']}  \n"
            f"**Versions** {facts['versions'] or '–'}")
    if compact:
        st.caption(text)
    else:
        st.markdown(text)


def page_header(title: str, profile: Profile | None = None, blurb: str | None = None) -> None:
    st.title(title)
    if blurb:
        st.caption(blurb)
    if profile is not None:
        facts = data.source_summary(profile.meta)
        badge = " :orange-badge[estimated]" if facts["kind"] == "estimated" else ""
        st.markdown(f"{facts['model']} · {facts['device']} · {facts['date']}{badge}")
        if data.acceptance_only(profile.meta):
            st.warning("This folder holds acceptance traces only (`ppsd profile --skip-latency`): its latency is a "
                       "quick sketch, not a profile to plan on. Pick a measured profile and choose this folder under "
                       "*Acceptance from*.", icon=":material/warning:")
        if profile.acceptance_source:
            st.caption(f":material/swap_horiz: Acceptance from `{profile.acceptance_source}` "
                       f"({len(profile.generations())} prompts); latency from the selected profile.")


@st.cache_data(show_spinner=False, max_entries=64)
def _meta(path: str, mtime: float) -> dict | None:
    from dashboard.estimates import read_meta

    return read_meta(path)


def profile_metas() -> dict[str, dict | None]:
    """{path: profile.json content} of every discovered profile (cached per file mtime), for
    matching an estimate with a measurement of the same model and device."""
    out = {}
    for p in discovered_profiles():
        f = Path(p) / PROFILE_FILE
        out[p] = _meta(p, f.stat().st_mtime if f.exists() else 0.0)
    return out


def heads_table_columns(comp=None) -> dict:
    """Number formats of the exit-head table (Overview and planner share it): speedups as ×, α and costs."""
    num = st.column_config.NumberColumn
    cols = {"draft head (ms)": num("draft cost (ms)", format="%.2f",
                                   help="What one draft's exit head costs (the head alone, for one token).")}
    for c in (comp.columns if comp is not None else []):
        if c.endswith(" α"):
            cols[c] = num(format="%.2f", help="The plan's acceptance α: " + answer.GLOSSARY["acceptance α"])
        elif "×" in c:
            cols[c] = num(format="%.2f×")
    return cols


def plan_table_columns(basis) -> dict:
    """Formats and help of `tables.top_plans`' columns."""
    num = st.column_config.NumberColumn
    cols = {basis.header: num(format="%.2f×", help=f"Speedup against {basis.baseline}: the figure the verdict "
                                                    "decides by. " + theme.GLOSSARY["speedup"]),
            "90% interval": st.column_config.TextColumn(help="Where the speedup of a run over 8 prompts like the "
                                                             "profile's falls, 9 times in 10."),
            "tokens/s": num(format="%.1f", help=f"Decoding speed as the plan runs against {basis.baseline}."),
            "acceptance α": num(format="%.2f", help=answer.GLOSSARY["acceptance α"]),
            "tokens a round": num(format="%.2f", help="Tokens committed per verification round."),
            "exit layer": num(format="%d", help=theme.GLOSSARY["exit_layer"]),
            "stages (layers)": st.column_config.TextColumn(help="The layers each pipeline stage runs.")}
    if basis.other_column:
        cols[basis.other_header] = num(format="%.2f×", help=f"The same plan against {basis.one_unit}.")
    return cols


def verdict_metrics(verdict) -> None:
    """The Overview's figures, short enough never to be cut: the recommendation's speedup against the verdict's
    baseline (the one-thread figure beneath), its tokens/s beside the baseline's, where it stops paying, and
    the noise band. The plan's name is the headline's (`answer.headline`), never a metric."""
    b = answer.basis(verdict)
    rec = verdict.recommended
    speculative = rec.plan.mode.speculative
    one = rec.speedup_vs_ar if speculative else 1.0 / b.one_unit_level
    m = st.columns(4)
    m[0].metric(f"speedup vs {b.baseline}", theme.fmt_x(verdict.score(rec) if speculative else 1.0),
                f"{one:.2f}× vs {b.one_unit}" if b.same_budget else None, delta_color="off", delta_arrow="off",
                help=theme.GLOSSARY["speedup"] + " " + ("Same budget: " + answer.GLOSSARY["same budget"]
                                                       if b.same_budget else ""))
    tps, base = verdict.tokens_per_s(rec), verdict.baseline_tokens_per_s
    m[1].metric("tokens/s" + (f" on {b.budget}" if b.same_budget else ""), "–" if tps is None else f"{tps:.1f}",
                None if base is None or not speculative else f"AR: {base:.1f}", delta_color="off", delta_arrow="off",
                help=f"Decoding speed of the recommendation as it runs against {b.baseline}"
                     + ("" if speculative else f" (plain AR; on one {b.unit}: {rec.tokens_per_s:.1f})") + ".")
    break_even_metric(m[2], verdict)
    m[3].metric("noise band", f"±{verdict.band.rel:.1%}", "within it: a tie", delta_color="off", delta_arrow="off",
                help=answer.band_words(verdict))


def break_even_metric(slot, verdict) -> None:
    """The best speculative plan's break-even acceptance as a metric: the acceptance at which it ties the
    verdict's baseline (sim/planner/break_even.py), the acceptance it was priced at beneath."""
    be, spec = verdict.break_even, verdict.best_speculative
    alpha = verdict.break_even_alpha
    label = "break-even acceptance α"
    if spec is None or be is None:
        slot.metric(label, "no plan", help="No speculative plan drafts usefully here, so none has a break-even.")
        return
    value = "not priced" if be.note else ("never" if alpha is None else f"{alpha:.2f}")
    slot.metric(label, value,
                f"profiled {be.priced:.2f}" if be.priced is not None else None, delta_color="off", delta_arrow="off",
                help=f"Break-even: {answer.GLOSSARY['break-even']} Here: {short_label(spec.plan.label())} ties "
                     f"{verdict.baseline} at this acceptance. 'never': not even with every draft accepted. Re-price "
                     "on your own prompts with the sidebar's *Acceptance from* (`ppsd plan --acceptance-from DIR`).")


def show_verdict(verdict) -> None:
    """The verdict box every page shows the same way: `sim.planner.verdict.Verdict.text` (word for word what
    `ppsd plan` prints), green for a win, blue for a tie, orange when AR stays ahead; beneath it the noise
    band in plain words, the plans passed over, and the glossary of the words it uses."""
    from sim.planner.verdict import Outcome

    box = {Outcome.WIN: st.success, Outcome.TIE: st.info}.get(verdict.outcome, st.warning)
    box(verdict.text, icon=":material/balance:")
    st.caption(" ".join(t for t in (answer.band_words(verdict), answer.passed_over(verdict)) if t))
    glossary()


def glossary() -> None:
    """The few words the verdict cannot do without, in plain words."""
    with st.expander("What the words mean: same budget, noise band, acceptance α, break-even"):
        st.markdown(answer.glossary_markdown())
