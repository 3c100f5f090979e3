"""`ppsd run` (decode for real: AR, EESD or PPSD) and `ppsd validate` (simulator vs measurement).

No torch at import time: the handlers import the runtime lazily.
"""

from __future__ import annotations

from sim.modes import MODES, Mode


from sim.hf_cli import add_runtime_options

def register(sub) -> None:
    p = sub.add_parser("run", help="decode for real with AR, EESD or PPSD and measure it",
                       description="Decode prompts for real and report tokens/s (median of repeats), prefill and "
                       "load time, accepted lengths and per-stage busy time. Speculative modes also run AR "
                       "in the same session for the speedup and the losslessness check.")
    p.add_argument("--model", default="smollm2-135m", help="smollm2-135m (default), tiny-llama, a folder, a .gguf")
    p.add_argument("--mode", choices=MODES, default=Mode.PPSD.value)
    p.add_argument("--exit", type=int, dest="exit_layer", help="exit layer E (1..N-1); needed for eesd/ppsd")
    p.add_argument("--draft-len", type=int, default=4, help="EESD drafts per round γ (default 4)")
    p.add_argument("--stages", type=int, default=2, help="PPSD pipeline stages k (default 2); with --emulate it "
                   "may exceed the CPU cores without --oversubscribe (emulated stages wait, they use no core)")
    p.add_argument("--stage-bounds", help="PPSD layer cuts, e.g. 0,15,30 (default: balanced by the profile's "
                   "time, as `ppsd simulate` cuts them)")
    p.add_argument("--profile", metavar="DIR", help="profile of this model whose measured times cut the PPSD stages "
                   "(default: the committed example profile when it is of this model, else by layer count)")
    p.add_argument("--prompts", default=None, help="JSONL in Spec-Bench format, or spec-bench (default: built-in)")
    p.add_argument("--limit", type=int, default=4, help="number of prompts (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force-trace", help="FILE of 0/1, accept-all or reject-all: acceptance follows it (timing only)")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens tokens")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu", help="cpu (default), cuda (or its alias gpu) or cuda:N; PPSD "
                   "needs one GPU per stage")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--port", type=int, help="rendezvous port for the stage processes (default: a free one)")
    p.add_argument("--stage-timeout", type=float, default=60.0, help="seconds without progress before a stage "
                   "counts as hung (default 60)")
    p.add_argument("--oversubscribe", action="store_true", help="allow more stages than CPU cores (slow; not "
                   "needed with --emulate)")
    p.add_argument("--launch", choices=("local", "torchrun"), default=None,
                   help="PPSD stage rules: local (default without torchrun: the shared epoch board lets stage 1 and "
                        "middle stages drop a stale pass between layers) or torchrun (stage 1 finishes stale passes "
                        "and reads a rejection only at its in-flight cap; what a run under torchrun does, whatever "
                        "this says)")
    p.add_argument("--emulate", metavar="PROFILE", help="emulated devices: run the real AR / EESD loops and PPSD "
                   "stage processes, but every layer, head and embedding waits for PROFILE's time instead of "
                   "computing (a measured or an analytic profile, e.g. `ppsd profile --analytic`); prompts are "
                   "synthetic of its prompt lengths, acceptance follows --force-trace or its recorded traces. "
                   "Measures what the control plane (messages, Python) adds at the profile's time scale")
    p.add_argument("--cores", type=int, default=None, metavar="N",
                   help="same-budget baseline: also measure AR (and EESD) with N threads, PPSD stages sharing N "
                        "cores, for speedup_vs_ar_tp (default: every core; 1 turns it off)")
    p.add_argument("--no-ar", action="store_true", help="skip the AR baseline run")
    p.add_argument("--heads", metavar="DIR", help="exit-head folder from `ppsd heads train`: draft with a trained head")
    p.add_argument("--exit-head", metavar="NAME", help="shared, trained (default with --heads) or vocab<V> "
                   "(the trained head over the V most frequent tokens, e.g. vocab4096)")
    add_runtime_options(p)
    p.add_argument("--timeline", help="write the measured timeline as a Chrome trace to this file")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_run)

    v = sub.add_parser("validate", help="run plans for real and compare with the simulator's prediction",
                       description="Measure AR and default EESD/PPSD plans on the profile's model and prompts, "
                       "predict each with the simulator from the same profile and traces, and write the "
                       "validation folder (validation.json, validation.csv, timelines/).")
    v.add_argument("--profile", help="profile folder (from ppsd profile); needed unless --emulate")
    v.add_argument("--emulate", metavar="PROFILE", help="emulated devices (see `ppsd run --emulate`): measure every "
                   "plan with PROFILE's times as waits, acceptance its recorded traces, and predict it with the "
                   "simulator on the same profile; PPSD plans may have more stages than the CPU has cores")
    v.add_argument("--predict-from", metavar="DIR", help="the profile the simulator predicts from: its latency and "
                   "its prompts' acceptance, laid over the measured prompts' lengths (default: the --profile / "
                   "--emulate one). validation.json says out_of_sample: true only when its prompts and the "
                   "measured ones are disjoint. With --emulate, e.g. an analytic estimate of a measured GPU profile")
    v.add_argument("--prompts", metavar="FILE", help="measure these prompts (Spec-Bench JSONL, spec-bench, or builtin) "
                   "instead of the profile's; each generates the profile's recorded number of new tokens")
    v.add_argument("--unseen", action="store_true", help="with --prompts: measure only prompts the predicting "
                   "profile never traced and (with --heads) the exit heads were not trained on")
    v.add_argument("--measured-traces", metavar="DIR", help="a profile folder holding the measured prompts' own "
                   "acceptance traces (e.g. `ppsd profile --prompts FILE --skip-latency`, made before the run; no "
                   "timing is read from it): each plan is also predicted at its prompts' own acceptance, priced "
                   "from the predicting profile, so an out-of-sample error splits into timing and acceptance")
    v.add_argument("--split", type=float, metavar="F", help="split the profile's prompts: in each category the first "
                   "fraction F predict (their recorded acceptance), the others are measured (out of sample)")
    v.add_argument("--draws", type=int, default=200, metavar="B",
                   help="bootstrap draws for each prediction's 90%% interval (default 200)")
    v.add_argument("--seed", type=int, default=0, help="seed of the intervals' draws (default 0)")
    v.add_argument("--plans", help="semicolon-separated plans mode:exit[:γ or k][:head=NAME][:alpha=A], e.g. "
                   "'eesd:10:3;ppsd:24:2:head=vocab4096;ppsd:15:2:alpha=0.9'. head= drafts with another exit head "
                   "than --exit-head's; alpha= forces seeded Bernoulli(A) acceptance in the run and the prediction "
                   "alike (a timing check, marked forced). Default: 3 exit layers × EESD and PPSD")
    v.add_argument("--out", help="validation folder (default runs/validation-<time>)")
    v.add_argument("--limit", type=int, default=8,
                   help="profiled prompts to decode, taken round-robin over categories (default 8; 0 = all)")
    v.add_argument("--repeats", type=int, default=3)
    v.add_argument("--warmup", type=int, default=1)
    v.add_argument("--warmup-tokens", type=int, default=0, metavar="N",
                   help="cut each warm-up pass to a prompt's first 32 tokens and N new ones: enough to bring a "
                        "process (and a pipeline's fresh stage processes) to speed, at a fraction of a whole pass's "
                        "time (default 0: whole passes; bench/machine_check.py gives 16)")
    v.add_argument("--force-trace", action="store_true", help="replay the profile's traces instead of the drafts")
    v.add_argument("--ar-once", action="store_true",
                   help="measure AR once up front (faster) instead of again after every plan; by default each "
                        "speedup is against the mean of the AR runs just before and after its plan")
    v.add_argument("--turns", type=int, default=0, metavar="N",
                   help="greedy: AR and each plan take turns every N prompts (AR on the first N, the plan on them, "
                        "AR on the next N, ...), each speedup against the AR that ran seconds before its prompts; "
                        "the same decoding as bracketing, paired minutes closer. 0 (default): AR before and after "
                        "every plan. On a machine whose speed moves in bursts of a minute, --turns 1")
    v.add_argument("--turn-plans", type=int, default=2, metavar="P",
                   help="with --turns: P plans share one AR turn, run on either side of it (plan A, AR, plan B; the "
                        "next prompts B, AR, A), so AR runs once for P plans and each is still seconds from it "
                        "(default 2; 1: AR beside every plan)")
    v.add_argument("--rounds", type=int, default=1, metavar="R",
                   help="measure every plan R times, once a round, plans in alternating order, each run against "
                        "the AR runs around it; a plan keeps its median round, and validation.json reports the "
                        "rounds' spread and the MAPE their noise alone would give (default 1). On a shared "
                        "machine whose speed wanders over minutes, R = 3 separates model error from noise")
    v.add_argument("--retime", action="store_true",
                   help="time the pieces of a decode step right before AR and every plan and price it with them; "
                        "validation.json keeps the profile-priced prediction beside it (predicted_speedup_profile)")
    v.add_argument("--stage-timeout", type=float, default=60.0)
    v.add_argument("--cores", type=int, default=None, metavar="N",
                   help="same-budget baseline: AR (and EESD) on N threads, predicted from the profile's thread "
                        "tables and measured (default: every core; 1 turns it off)")
    v.add_argument("--heads", metavar="DIR", help="exit-head folder the profile was made with (`ppsd profile --heads`)")
    v.add_argument("--exit-head", metavar="NAME", help="shared, trained (default with --heads) or vocab<V>; "
                   "the profile must hold that head's traces and latency")
    v.add_argument("--temperature", type=float, default=0.0,
                   help="sampled validation at T > 0: every plan and AR decode by sampling at T, once per seed "
                        "(--seeds), predicted from the profile's beta at exactly T (`ppsd profile --temperatures`); "
                        "reports predicted vs measured speedup and acceptance rate with the seeds' spread "
                        "(default 0 = greedy)")
    v.add_argument("--seeds", type=int, default=None, metavar="S",
                   help="with --temperature: sampled runs per plan, seeds 0..S-1 (default 3)")
    add_runtime_options(v, both=True)
    v.add_argument("--json", action="store_true", help="print validation.json alone on stdout (progress on stderr)")
    v.set_defaults(func=cmd_validate)


def cmd_run(args) -> int:
    from runtime.runner import run_command

    if getattr(args, "runtime", "ppsd") == "hf":
        from runtime.hf_assisted import run_command as run_hf_command

        return run_hf_command(args)

    return run_command(args)


def cmd_validate(args) -> int:
    from runtime.validation.command import validate_command

    return validate_command(args)


