"""Profile a model: start `ppsd profile` in the background and watch its progress. The new
profile folder lands under the runs root and appears in the sidebar when done."""

from __future__ import annotations

import datetime as dt
import re
import shlex

import streamlit as st

from dashboard import data, jobs, ui

JOB_KEY = "profile_job"

ui.page_header("Profile a model", None, "Measure per-layer latency and exit-layer acceptance of a model on this "
               "machine. Runs `ppsd profile` as a background process (torch never loads into the dashboard).")

MODELS = {
    "SmolLM2-135M-Instruct (embedded)": "smollm2-135m",
    "tiny random Llama (seconds; for trying the page)": "tiny-llama",
    "other: Hugging Face folder, .gguf file or cached hub id": None,
}
PROMPTS = {
    "built-in prompt set (26 prompts, 13 categories)": None,
    "Spec-Bench questions": "spec-bench",
    "my own JSONL file (Spec-Bench format)": "file",
}

job: jobs.Job | None = st.session_state.get(JOB_KEY)
running = job is not None and job.returncode is None

with st.form("profile_form"):
    c1, c2 = st.columns(2)
    model_label = c1.selectbox("model", list(MODELS), help="Any Llama-family causal LM (Llama, Qwen2, Mistral).")
    model_other = c1.text_input("path or hub id (for 'other')", placeholder="/models/Qwen2.5-0.5B or model.gguf")
    device = c2.selectbox("device", ["cpu", "cuda"], help="cuda needs a GPU visible to this machine.")
    prompt_label = c2.selectbox("prompt set", list(PROMPTS),
                                help="Acceptance is measured on the full model's greedy continuations of these prompts.")
    prompt_file = c2.text_input("JSONL path (for 'my own')", placeholder="prompts.jsonl")
    size = st.radio("size", list(jobs.SIZES), index=0, horizontal=True,
                    help="More prompts and tokens give a steadier acceptance estimate; latency tables are the same.")
    name = st.text_input("output folder name", placeholder="auto: <model>-<device>-<time>",
                         help=f"Written under {data.runs_root()}.")
    submitted = st.form_submit_button("Start profiling", type="primary", disabled=running)

if submitted:
    model = MODELS[model_label] or model_other.strip()
    prompts = PROMPTS[prompt_label]
    if prompts == "file":
        prompts = prompt_file.strip()
    if not model:
        st.error("no model given; type a folder, .gguf file or hub id next to 'other'")
    elif PROMPTS[prompt_label] == "file" and not prompts:
        st.error("no prompt file given; type the path of a Spec-Bench-format JSONL file")
    else:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name.strip() or
                      f"{model.rsplit('/', 1)[-1]}-{device}-{dt.datetime.now():%Y%m%d-%H%M%S}").strip("-.")
        out = data.runs_root() / slug
        if (out / "profile.json").exists():
            st.error(f"{out} already holds a profile; choose another output folder name")
        else:
            cmd = jobs.profile_command(model, device, prompts, size, out)
            st.session_state[JOB_KEY] = jobs.start(cmd, out, data.runs_root() / ".logs")
            running = True
    st.caption(f"Expected time: {jobs.SIZES[size][1]} on a 2-core CPU.")


def watch() -> None:
    """Re-drawn every second while a run is going; the full page reruns once when it ends so the
    sidebar lists the new profile."""
    job: jobs.Job | None = st.session_state.get(JOB_KEY)
    if job is None:
        return
    rc = job.returncode
    prog = job.progress()
    st.subheader("Current run" if rc is None else "Last run")
    st.code(shlex.join(job.cmd), language="bash")
    if rc is None:
        label = f"{prog.phase}: {prog.done} / {prog.total}" if prog.phase else "starting (loading torch and the model)…"
        st.progress(prog.fraction, text=label)
        if st.button("Stop", key="stop_job"):
            job.stop()
            st.rerun(scope="app")
    elif rc == 0:
        st.progress(1.0, text="done")
        st.success(f"Profile written to `{job.out}`; pick it in the sidebar.")
    else:
        st.error(jobs.error_line(prog.log, rc))
    with st.expander("log", expanded=rc is None):
        st.code("\n".join(prog.log[-200:]) or "(no output yet)", language="text")
    if rc is not None and not st.session_state.get("profile_job_seen_end") == id(job):
        st.session_state["profile_job_seen_end"] = id(job)
        ui.discovered_profiles.clear()
        st.rerun(scope="app")


# poll only while a run is going, so an idle page does not rerun every second
st.fragment(watch, run_every=1.0 if running else None)()
