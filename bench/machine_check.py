"""The whole profile -> validate -> report chain on this machine, in one command.

    .venv/bin/python -m bench.machine_check --out examples/smollm2-135m-machine-check-<machine>
        [--heads DIR] [--profile DIR] [--prompt-set N] [--limit 8] [--cores C] [--plans SPEC] [--retime]

A timing model shaped on one machine must be checked on the next one a user brings. This script does
what a new user would do there, out of sample, and writes what it found beside the machine's name:

  1. exit heads: `ppsd heads train --exits 15,20,24,27` into the cache (reused when `--heads` is given
     or the cache already holds them);
  2. a fresh profile: `ppsd profile --heads H --heldout` on `--per-category` Spec-Bench prompts a
     category that the heads were not trained on (reused with `--profile DIR`);
  3. the measured prompts: the Spec-Bench prompts that neither the profile traced nor the heads were
     trained on, taken round-robin over categories; `--prompt-set N` skips the first N × limit of
     them, so set 0 and set 1 are disjoint (look at one while changing the model, confirm on the other);
  4. their acceptance traces: `ppsd profile --prompts <those> --skip-latency` (no timing). The validation
     still predicts from the profile's prompts; these give each plan a second prediction at the
     measured prompts' own acceptance, so an error splits into what the machine's timing model missed
     and what eight prompts drafting better or worse than the profile's pool moved;
  5. `ppsd validate --prompts <those> --unseen --heads H --cores C --plans PLANS --measured-traces T` (10
     plans by default: 4 EESD, 5 PPSD with real acceptance, 1 PPSD with forced acceptance);
  6. the report: `machine_check.json` (machine, each step's duration, the headline figures, every
     plan) and `NOTE.md`, next to the `profile/` and `validation/` folders, all under `--out`.

The headline figures have targets (TARGETS): speedup MAPE (<= 5%, over >= 10 plans with >= 3 EESD),
same-budget MAPE (<= 5%), 90% interval coverage (>= 80%), and every greedy output identical to AR. The
script reports them; it does not judge the machine by them (a bench, not a test). Run it on an idle
machine; it takes tens of minutes, most of them validating. Two plans sharing each AR turn and 16-token
warm-ups (the defaults) take about a third less than an AR turn beside every plan and whole warm-up
passes; training the exit heads first, where the cache holds none, adds a few minutes.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EXITS = "15,20,24,27"
# Ten plans that span what a user would try: EESD with a cheap and a shared draft head (>= 3 EESD
# plans, as the targets ask), PPSD at three exits with each kind of head, and one forced-acceptance
# PPSD plan (a timing check that does not depend on the heads).
DEFAULT_PLANS = ";".join([
    "eesd:24:3:head=vocab4096", "eesd:27:2:head=shared", "eesd:20:3:head=trained", "eesd:27:1:head=vocab16384",
    "ppsd:24:2:head=vocab4096", "ppsd:27:2:head=vocab4096", "ppsd:24:2:head=trained", "ppsd:20:2:head=trained",
    "ppsd:24:2:head=shared", "ppsd:15:2:alpha=0.9",
])
TARGETS = {"mape_speedup_pct": 5.0, "mape_speedup_vs_ar_tp_pct": 5.0, "coverage": 0.80,
           "interval_half_width_median_pct": 12.0}


def log(msg: str) -> None:
    print(f"[machine-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine_facts() -> dict:
    """The machine a check ran on, as a reader of the note needs it (CPU model, cores, memory)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem_gib, "python": platform.python_version(),
            "platform": platform.platform()}


def ppsd(args: list[str], step: str) -> None:
    """Run `python -m ppsd ARGS`, its progress on our stderr; stop the check with its one-line error."""
    log(f"{step}: ppsd {' '.join(args)}")
    res = subprocess.run([sys.executable, "-m", "ppsd", *args], cwd=ROOT)
    if res.returncode:
        sys.exit(f"machine-check: {step} failed (exit {res.returncode}); see the message above")


def measured_prompt_file(profile_dir: Path, heads_dir: Path | None, prompt_set: int, limit: int, out: Path,
                         prompts: str = "spec-bench") -> list[str]:
    """Write set `prompt_set` of the unseen prompts of `prompts` (spec-bench or a Spec-Bench-format
    JSONL; round-robin over categories, the first prompt_set × limit skipped) as a Spec-Bench JSONL
    at `out`; returns their ids."""
    from ppsd.prompts import load_prompts
    from ppsd.profile import load_profile
    from validation.prompts import pick_round_robin, unseen_exclusions

    drop = set().union(*unseen_exclusions(load_profile(profile_dir), str(heads_dir) if heads_dir else None))
    unseen = [p for p in load_prompts(prompts) if str(p.prompt_id) not in drop and p.text not in drop]
    rows = [{"prompt_id": p.prompt_id, "category": p.category, "prompt": p.text} for p in unseen]
    ordered = pick_round_robin(rows, len(rows))
    chosen = ordered[prompt_set * limit:(prompt_set + 1) * limit]
    if len(chosen) < limit:
        sys.exit(f"machine-check: --prompt-set {prompt_set} needs {limit} unseen prompts past the first "
                 f"{prompt_set * limit}, only {len(chosen)} are left; give a smaller --prompt-set or --limit")
    out.write_text("".join(json.dumps({"question_id": r["prompt_id"], "category": r["category"],
                                       "turns": [r["prompt"]]}) + "\n" for r in chosen))
    return [str(r["prompt_id"]) for r in chosen]


def _round(x: float | None, digits: int = 2) -> float | None:
    """`x` rounded to `digits`, None left as it is."""
    return None if x is None else round(x, digits)


def headline(doc: dict) -> dict:
    """The headline figures (the ones TARGETS sets targets for, and what explains them), from a
    validation.json."""
    from ppsd.statistics import mape, percent_error

    rows = [r for r in doc["rows"] if r["mode"] != "ar"]
    eesd = [r for r in rows if r["mode"] == "eesd"]
    matches = [r.get("outputs_match_ar") for r in rows if r.get("outputs_match_ar") is not None]

    def rows_mape(rs, key="speedup_error_pct"):
        return _round(mape(r.get(key) for r in rs))

    # with --retime the row's prediction is priced with the pieces timed right before it; what a
    # user's `ppsd plan` would have said is the profile-priced one beside it
    from sim.intervals import coverage

    priced = [r for r in rows if r.get("predicted_speedup_profile") is not None]
    profile_errors = [percent_error(r["predicted_speedup_profile"], r["measured_speedup"]) for r in priced]
    # each interval moved to the profile-priced point (the same relative interval)
    moved = [{**r, "predicted_speedup_lo": r["predicted_speedup_lo"] * r["predicted_speedup_profile"] / r["predicted_speedup"],
              "predicted_speedup_hi": r["predicted_speedup_hi"] * r["predicted_speedup_profile"] / r["predicted_speedup"]}
             for r in priced if r.get("predicted_speedup_lo") is not None]
    covered, _ = coverage(moved)
    # at the measured prompts' own acceptance (--measured-traces): the timing model alone; a forced
    # plan's acceptance is its forcing, so its own prediction stands
    own = [r["speedup_error_in_sample_pct"] if r.get("speedup_error_in_sample_pct") is not None
           else r["speedup_error_pct"] if r.get("forced_alpha") is not None else None for r in rows]
    own_eesd = [e for e, r in zip(own, rows) if r["mode"] == "eesd" and e is not None]
    alpha_errors = [abs(r["predicted_acceptance_rate"] - r["measured_acceptance_rate"]) for r in rows
                    if r.get("forced_alpha") is None and r.get("predicted_acceptance_rate") is not None
                    and r.get("measured_acceptance_rate") is not None]
    own_alpha_errors = [abs(r["predicted_acceptance_rate_in_sample"] - r["measured_acceptance_rate"]) for r in rows
                        if r.get("predicted_acceptance_rate_in_sample") is not None
                        and r.get("measured_acceptance_rate") is not None]
    has_own = any(r.get("speedup_error_in_sample_pct") is not None for r in rows)
    return {**_budget_reference_headline(doc, rows),
            "mape_speedup_own_acceptance_pct": _round(mape(own)) if has_own else None,
            "mape_speedup_own_acceptance_eesd_pct": _round(mape(own_eesd)) if has_own else None,
            "acceptance_error_mean_abs": _round(mape(alpha_errors), 3),
            "acceptance_error_own_mean_abs": _round(mape(own_alpha_errors), 3) if has_own else None,
            "plans": len(rows), "eesd_plans": len(eesd), "mape_speedup_pct": doc.get("mape_speedup_pct"),
            "mape_speedup_profile_pct": _round(mape(profile_errors)),
            "mape_speedup_vs_ar_tp_profile_pct": rows_mape(rows, "speedup_vs_ar_tp_error_profile_pct"),
            "coverage_profile": round(covered, 3) if covered is not None else None,
            "mape_speedup_eesd_pct": rows_mape(eesd),
            "mape_speedup_ppsd_pct": rows_mape([r for r in rows if r["mode"] == "ppsd"]),
            "mape_speedup_vs_ar_tp_pct": doc.get("mape_speedup_vs_ar_tp_pct"), "coverage": doc.get("coverage"),
            "interval_half_width_median_pct": doc.get("interval_half_width_median_pct"),
            "coverage_plans": doc.get("coverage_plans"), "lossless": all(matches) if matches else None,
            "lossless_plans": len(matches), "signed_mean_error_pct":
                round(sum(r["speedup_error_pct"] for r in rows) / len(rows), 2) if rows else None}


def _budget_reference_headline(doc: dict, rows: list[dict]) -> dict:
    """How the run priced every core (validation.json's `budget_reference`): AR's thread gain measured
    and priced, and the same-budget MAPE (priced from the profile where --retime also re-timed) had each
    plan been taken against its own group's AR turns on every core instead."""
    from ppsd.statistics import mape, percent_error

    ref = doc.get("budget_reference")
    if not ref:
        return {}
    beside = {p["plan"]: p.get("measured_speedup_vs_ar_tp_beside") for p in ref.get("plans", [])}
    errors = []
    for r in rows:
        pred = r.get("predicted_speedup_vs_ar_tp_profile") or r.get("predicted_speedup_vs_ar_tp")
        meas = beside.get(r["plan"])
        if pred and meas:
            errors.append(percent_error(pred, meas))
    return {"ar_thread_gain": ref.get("ar_thread_gain"), "ar_thread_gain_priced": ref.get("ar_thread_gain_priced"),
            "ar_thread_chunks": len(ref.get("ar_thread_ratios") or []),
            "mape_speedup_vs_ar_tp_beside_pct": _round(mape(errors))}


def note(report: dict) -> str:
    h, m = report["headline"], report["machine"]
    lines = [f"# Machine check: {m['cpu']} ({m['cores']} cores)", "",
             f"`python -m bench.machine_check`, {report['started']} to {report['finished']} UTC "
             f"({report['minutes']:.0f} min), prompt set {report['prompt_set']} "
             f"({', '.join(report['measured_prompt_ids'])}).", ""]
    protocol = report.get("protocol") or {}
    pair = (f", {protocol['turn_plans']} plans sharing each AR turn, one on either side of it"
            if (protocol.get("turn_plans") or 1) > 1 else "")
    ar = {"turns": f"AR and each plan taking turns, a chunk of prompts at a time (`--turns`){pair}",
          "bracketed": "AR measured right before and after each plan"}.get(report.get("ar_reference") or "")
    if ar:
        lines += [f"Each measured speedup is against {ar}.", ""]
    lines += ["| figure | measured | target |", "|---|---|---|"]
    profile_keys = ("mape_speedup_profile_pct", "coverage_profile", "mape_speedup_vs_ar_tp_profile_pct")
    shown = [k for k in profile_keys if h.get(k) is not None]
    for key, label, fmt in (("mape_speedup_profile_pct", "speedup MAPE, priced from the profile alone", "{:.1f}%"),
                            ("coverage_profile", "  its 90% intervals cover", "{:.0%}"),
                            ("mape_speedup_vs_ar_tp_profile_pct", "  its same-budget MAPE", "{:.1f}%"),
                            ("mape_speedup_pct", "speedup MAPE" + (", pieces re-timed before each plan (--retime)"
                                                                   if h.get("mape_speedup_profile_pct") is not None
                                                                   else ", priced from the profile"), "{:.1f}%"),
                            ("mape_speedup_eesd_pct", "  EESD plans", "{:.1f}%"),
                            ("mape_speedup_ppsd_pct", "  PPSD plans", "{:.1f}%"),
                            ("signed_mean_error_pct", "mean signed error (predicted - measured)", "{:+.1f}%"),
                            ("mape_speedup_vs_ar_tp_pct", "same-budget MAPE", "{:.1f}%"),
                            ("coverage", "90% interval coverage", "{:.0%}"),
                            ("interval_half_width_median_pct", "  median interval half-width", "±{:.1f}%"),
                            ("acceptance_error_mean_abs", "acceptance error, mean |predicted - measured|", "{:.3f}"),
                            ("mape_speedup_own_acceptance_pct", "speedup MAPE at the measured prompts' own acceptance "
                                                                "(traced before the run): the timing model alone",
                             "{:.1f}%"),
                            ("mape_speedup_own_acceptance_eesd_pct", "  EESD plans", "{:.1f}%"),
                            ("acceptance_error_own_mean_abs", "  its acceptance error", "{:.3f}")):
        v = h.get(key)
        if key in profile_keys and key not in shown:
            continue  # without --retime the main figures are the profile-priced ones
        if key.startswith(("mape_speedup_own", "acceptance_error_own")) and v is None:
            continue  # a check without the measured prompts' traces
        target = TARGETS.get({"mape_speedup_profile_pct": "mape_speedup_pct", "coverage_profile": "coverage",
                              "mape_speedup_vs_ar_tp_profile_pct": "mape_speedup_vs_ar_tp_pct"}.get(key, key))
        tgt = "" if target is None else ("≥ " + f"{target:.0%}" if key.startswith("coverage") else f"≤ {target:.0f}%")
        lines.append(f"| {label} | {'n/a' if v is None else fmt.format(v)} | {tgt} |")
    lines.append(f"| greedy outputs identical to AR | {h['lossless']} ({h['lossless_plans']} plans) | all |")
    if h.get("ar_thread_gain") is not None:
        priced = h.get("ar_thread_gain_priced")
        lines.append(f"| AR on every core / on one thread, this run (median of {h['ar_thread_chunks']} chunks)"
                     + (f"; the profile prices {priced:.2f}x" if priced else "") + f" | {h['ar_thread_gain']:.2f}x | |")
    if h.get("mape_speedup_vs_ar_tp_beside_pct") is not None:
        lines.append("| same-budget MAPE had each plan been taken against its own group's AR turns on every core "
                     f"(the pairing before thread gains) | {h['mape_speedup_vs_ar_tp_beside_pct']:.1f}% | |")
    own = any(r.get("predicted_speedup_in_sample") is not None for r in report["rows"])
    lines += ["", "| plan | predicted | measured | error | interval | profile-priced | same budget pred / meas "
                  "| acceptance pred / meas |" + (" at own acceptance: predicted, error, α |" if own else ""),
              "|---|---|---|---|---|---|---|---|" + ("---|" if own else "")]
    for r in report["rows"]:
        if r["mode"] == "ar":
            continue
        lo, hi = r.get("predicted_speedup_lo"), r.get("predicted_speedup_hi")
        lines.append(f"| {r['plan']} | {r['predicted_speedup']:.3f} | {r['measured_speedup']:.3f} | "
                     f"{r['speedup_error_pct']:+.1f}% | {'' if lo is None else f'{lo:.3f}-{hi:.3f}'} | "
                     f"{'' if r.get('predicted_speedup_profile') is None else format(r['predicted_speedup_profile'], '.3f')} | "
                     f"{r.get('predicted_speedup_vs_ar_tp') or 0:.3f} / {r.get('measured_speedup_vs_ar_tp') or 0:.3f} | "
                     f"{r.get('predicted_acceptance_rate') or 0:.3f} / {r.get('measured_acceptance_rate') or 0:.3f} |"
                     + (_own_cell(r) if own else ""))
    lines += ["", "Steps (minutes): " + ", ".join(f"{k} {v:.1f}" for k, v in report["step_minutes"].items()), ""]
    return "\n".join(lines) + "\n"


def _own_cell(row: dict) -> str:
    """A plan's prediction at its measured prompts' own acceptance, as a table cell."""
    if row.get("predicted_speedup_in_sample") is None:
        return " |"
    a = row.get("predicted_acceptance_rate_in_sample")
    return (f" {row['predicted_speedup_in_sample']:.3f}, {row['speedup_error_in_sample_pct']:+.1f}%"
            + ("" if a is None else f", {a:.3f}") + " |")


def repoint(file: Path, old: str, new: str) -> None:
    """validation.json names its profile by the path it had while the check ran (the `.partial`
    work folder): name the folder it ended in, so the dashboard pairs them."""
    doc = json.loads(file.read_text())
    for key in ("profile", "predicted_from", "measured_prompts", "measured_traces", "note"):
        if isinstance(doc.get(key), str):
            doc[key] = doc[key].replace(old, new)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(file)


def rewrite_report(out: Path) -> int:
    """The report of an existing check folder again, from its validation.json (after a change to
    how the report reads it); the runs and the rest of machine_check.json stay."""
    file = out / "machine_check.json"
    if not file.is_file() or not (out / "validation" / "validation.json").is_file():
        sys.exit(f"machine-check: {out} holds no machine_check.json and validation/; give a folder this script wrote")
    report = json.loads(file.read_text())
    doc = json.loads((out / "validation" / "validation.json").read_text())
    report.update(headline=headline(doc), rows=doc["rows"], targets=TARGETS)
    file.write_text(json.dumps(report, indent=1) + "\n")
    (out / "NOTE.md").write_text(note(report))
    print(note(report))
    return 0


def parse_args(argv=None) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for profile/, validation/, machine_check.json, NOTE.md")
    ap.add_argument("--heads", metavar="DIR", help="exit heads to reuse (default: train into the cache if absent)")
    ap.add_argument("--profile", metavar="DIR", help="a profile of this machine to reuse instead of profiling")
    # 3: the validation predicts a measured prompt from its own category's profiled prompts only when the
    # category has sim.intervals.MIN_STRATUM (3) of them; with fewer every prompt is priced with the pooled
    # acceptance, which over-predicts the categories that draft worse than the pool (Spec-Bench's
    # translation, summarization and RAG prompts against the MT-bench ones)
    ap.add_argument("--per-category", type=int, default=3,
                    help="profiled prompts a Spec-Bench category (default 3, the fewest a category is predicted "
                         "from on its own)")
    ap.add_argument("--prompt-set", type=int, default=0, help="which disjoint set of unseen prompts to measure")
    ap.add_argument("--prompts", default="spec-bench",
                    help="where the measured prompts come from: spec-bench (default) or a Spec-Bench-format JSONL "
                         "(a held-out task); the profile and the heads always use Spec-Bench")
    ap.add_argument("--limit", type=int, default=8, help="measured prompts (default 8)")
    ap.add_argument("--cores", type=int, default=min(os.cpu_count() or 1, 2), help="same-budget cores (default 2)")
    ap.add_argument("--plans", default=DEFAULT_PLANS, help="plans to validate (ppsd validate --plans syntax)")
    ap.add_argument("--retime", action="store_true",
                    help="also price each plan with the pieces (and, for PPSD, the co-run slowdown) timed before it; "
                         "the note shows the profile-priced figures beside")
    ap.add_argument("--profile-repeats", type=int, default=20,
                    help="interleaved rounds of the latency grid (default 20: a bursty shared machine needs them)")
    ap.add_argument("--runs", type=int, default=1,
                    help="timed runs of each plan after one warm-up (default 1: AR is measured again around "
                         "every plan, which is what removes the machine's drift; 3 triples the time)")
    # in turns: each prompt's AR runs seconds before the plan's (validation/interleave.py), so a burst of
    # the machine shorter than a plan slows AR and the plan alike instead of the plan alone. 2 prompts a
    # turn: a PPSD run starts its stage processes afresh and warms up once a chunk; two prompts a chunk
    # halve those start-ups against one and keep AR within ~20 s of the plan
    ap.add_argument("--turns", type=int, default=2,
                    help="AR and each plan take turns every N prompts (default 2); 0: AR before and after each plan")
    # 2 plans an AR turn and 16-token warm-ups: AR on one thread and on every core beside every plan is
    # ~40% of a validation, and a PPSD chunk's whole warm-up pass as long as its timed one
    # (validation/measuring.py, runtime/warmup.py)
    ap.add_argument("--turn-plans", type=int, default=2,
                    help="plans sharing one AR turn, on either side of it (default 2; 1: AR beside every plan)")
    ap.add_argument("--warmup-tokens", type=int, default=16,
                    help="tokens of each prompt a warm-up pass decodes (default 16; 0: whole passes)")
    ap.add_argument("--force", action="store_true", help="overwrite --out")
    ap.add_argument("--report-only", action="store_true",
                    help="re-write machine_check.json's headline and NOTE.md from --out's validation (no runs)")
    return ap.parse_args(argv)


def work_folder(out: Path, args: argparse.Namespace) -> Path:
    """The empty `.partial` folder beside `out` the check works in (renamed to `out` once it is done);
    stops on an `out` that holds something (without --force) or on bad sizes."""
    if out.exists() and any(out.iterdir()) and not args.force:
        sys.exit(f"machine-check: {out} is not empty; give another --out or --force")
    if args.limit < 1 or args.prompt_set < 0:
        sys.exit("machine-check: --limit must be >= 1 and --prompt-set >= 0")
    work = out.with_name(out.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def timed(minutes: dict[str, float], step: str, fn):
    """fn(), its duration in minutes recorded under `step`."""
    t = time.monotonic()
    result = fn()
    minutes[step] = (time.monotonic() - t) / 60
    return result


def exit_heads(args: argparse.Namespace) -> Path:
    """Step 1: the exit heads, `--heads` or the cache's (trained there when it holds none)."""
    from ppsd.paths import cache_dir
    from runtime.heads.store import HEADS_FILE

    heads = Path(args.heads).expanduser() if args.heads else cache_dir() / "heads" / "smollm2-135m"
    if not (heads / HEADS_FILE).is_file() and not args.heads:
        ppsd(["heads", "train", "--model", "smollm2-135m", "--exits", EXITS, "--out", str(heads)], "exit heads")
    elif not heads.is_dir():
        sys.exit(f"machine-check: --heads {heads} is not a folder; give one written by `ppsd heads train`")
    return heads


def fresh_profile(args: argparse.Namespace, heads: Path, work: Path) -> Path:
    """Step 2: the profile under `work` (a copy of `--profile`, else measured now on held-out prompts)."""
    profile = work / "profile"
    if args.profile:
        shutil.copytree(args.profile, profile)
    else:
        ppsd(["profile", "--model", "smollm2-135m", "--device", "cpu", "--dtype", "float32", "--prompts", "spec-bench",
              "--per-category", str(args.per_category), "--max-new-tokens", "64", "--heads", str(heads), "--heldout",
              "--repeats", str(args.profile_repeats),
              "--out", str(profile)], "profile")
    return profile


def measured_traces(prompt_file: Path, heads: Path, work: Path) -> Path:
    """Step 4: the measured prompts' own acceptance traces (no timing)."""
    traces = work / "measured-traces"
    ppsd(["profile", "--model", "smollm2-135m", "--device", "cpu", "--dtype", "float32", "--prompts", str(prompt_file),
          "--max-new-tokens", "64", "--heads", str(heads), "--skip-latency", "--out", str(traces)], "measured traces")
    return traces


def validate(args: argparse.Namespace, profile: Path, heads: Path, prompt_file: Path, traces: Path,
             work: Path) -> Path:
    """Step 5: `ppsd validate` of the plans on the measured prompts; returns its folder."""
    validation = work / "validation"
    ppsd(["validate", "--profile", str(profile), "--heads", str(heads), "--prompts", str(prompt_file), "--unseen",
          "--measured-traces", str(traces),
          "--limit", str(args.limit), "--cores", str(args.cores), "--plans", args.plans, "--out", str(validation),
          "--repeats", str(args.runs), "--warmup", "1", "--turns", str(args.turns),
          "--turn-plans", str(args.turn_plans), "--warmup-tokens", str(args.warmup_tokens),
          *(["--retime"] if args.retime else [])], "validate")
    return validation


def build_report(args: argparse.Namespace, validation: Path, started: _dt.datetime, t_start: float,
                 minutes: dict[str, float], ids: list[str]) -> dict:
    """Step 6: machine_check.json's content, from the validation and how the check ran."""
    doc = json.loads((validation / "validation.json").read_text())
    finished = _dt.datetime.now(_dt.timezone.utc)
    return {"machine": machine_facts(), "started": started.strftime("%Y-%m-%d %H:%M"),
            "finished": finished.strftime("%H:%M"), "minutes": (time.monotonic() - t_start) / 60,
            "step_minutes": {k: round(v, 2) for k, v in minutes.items()}, "prompt_set": args.prompt_set,
            "measured_prompt_ids": ids, "plans": args.plans,
            "protocol": {"turns": args.turns, "turn_plans": args.turn_plans, "warmup_tokens": args.warmup_tokens,
                         "retime": bool(args.retime), "runs": args.runs},
            "ar_reference": doc.get("ar_reference"), "targets": TARGETS, "headline": headline(doc),
            "rows": doc["rows"]}


def publish(report: dict, work: Path, out: Path) -> None:
    """Write the report and its note into `work`, then put `work` where `out` was."""
    (work / "machine_check.json").write_text(json.dumps(report, indent=1) + "\n")
    (work / "NOTE.md").write_text(note(report))
    if out.exists():
        shutil.rmtree(out)
    work.rename(out)
    repoint(out / "validation" / "validation.json", str(work), str(out))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report_only:
        return rewrite_report(Path(args.out))
    out = Path(args.out)
    work = work_folder(out, args)
    started, t_start = _dt.datetime.now(_dt.timezone.utc), time.monotonic()
    minutes: dict[str, float] = {}
    heads = timed(minutes, "heads", lambda: exit_heads(args))
    profile = timed(minutes, "profile", lambda: fresh_profile(args, heads, work))
    prompt_file = work / "measured_prompts.jsonl"
    ids = measured_prompt_file(profile, heads, args.prompt_set, args.limit, prompt_file, args.prompts)
    log(f"prompt set {args.prompt_set}: {', '.join(ids)}")
    traces = timed(minutes, "traces", lambda: measured_traces(prompt_file, heads, work))
    validation = timed(minutes, "validate", lambda: validate(args, profile, heads, prompt_file, traces, work))
    report = build_report(args, validation, started, t_start, minutes, ids)
    publish(report, work, out)
    print(note(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
