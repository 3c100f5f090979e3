"""`ppsd simulate --serve` (a workload served under a policy, vLLM's flag names) and `ppsd plan --rate R` (the
policies ranked at one load). Registered by `sim/cli.py`; torch-free."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ppsd.errors import UserError
from ppsd.paths import atomic_write_json

DEFAULT_PROMPTS = 200
DEFAULT_TRACE_CAP = 64


def add_simulate_options(p) -> None:
    g = p.add_argument_group("serving traffic (--serve; flags as `vllm bench serve` names them)")
    g.add_argument("--serve", action="store_true",
                   help="simulate a served workload: requests arriving at a rate, continuously batched")
    g.add_argument("--policy", default="ar", metavar="SPEC",
                   help="ar, eesd:E:γ, ppsd:E, off-above:E:γ:B, table:E:1=4,2=3,8=0 or goodput:E[:γmax] (default ar)")
    g.add_argument("--request-rate", type=float, metavar="R",
                   help="requests a second (inf: all at once); with --trace, the rate its clock is scaled to")
    g.add_argument("--burstiness", type=float, default=1.0, metavar="B",
                   help="Gamma shape of the gaps: 1 = Poisson (default), below 1 burstier")
    g.add_argument("--num-prompts", type=int, default=DEFAULT_PROMPTS, metavar="N",
                   help=f"requests (default {DEFAULT_PROMPTS})")
    g.add_argument("--trace", metavar="FILE", help="arrival times and lengths: the Azure LLM-inference CSV or JSONL")
    g.add_argument("--trace-start", type=float, default=0.0, metavar="S", help="seconds into the trace (default 0)")
    g.add_argument("--output-len", type=int, metavar="N",
                   help="tokens each request asks for (default: its prompt's own generation); with --trace, the "
                        f"cap its scaled lengths meet (default {DEFAULT_TRACE_CAP})")
    g.add_argument("--max-batch", type=int, metavar="B",
                   help="most sequences decoding at once (vLLM's --max-num-seqs; default: the largest batch size "
                        "the profile measured)")
    g.add_argument("--max-tokens", type=int, default=2048, metavar="T",
                   help="token budget of an iteration (vLLM's --max-num-batched-tokens; default 2048)")
    g.add_argument("--prefill", default="prefill-first", choices=["prefill-first", "chunked"],
                   help="prefill-first (what ppsd serve runs) or chunked (simulated only)")
    g.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLO for goodput, e.g. ttft:500 tpot:50")
    g.add_argument("--replications", type=int, default=20, metavar="R",
                   help="replications for the 90%% intervals (default 20; 0: the point prediction only)")
    g.add_argument("--workload", metavar="FILE", help="serve a workload ppsd saved (--workload-out) instead")
    g.add_argument("--workload-out", metavar="FILE", help="save the workload served (replay it with --workload)")
    g.add_argument("--sweep-rates", metavar="auto|R1,R2,...",
                   help="predict the policy and AR at each rate (auto: light load to past AR's capacity) and "
                        "print where the policy stops beating AR on p50 and p99 TPOT")
    g.add_argument("--save-result", metavar="FILE", help="write the result, every request's timing included, as JSON")


def add_plan_options(q) -> None:
    g = q.add_argument_group("serving traffic (--rate)")
    g.add_argument("--rate", type=float, metavar="R",
                   help="rank serving policies at R requests a second (needs the profile's latency.batch)")
    g.add_argument("--burstiness", type=float, default=1.0, metavar="B", help="Gamma shape of the gaps (1: Poisson)")
    g.add_argument("--slo", "--goodput", dest="slo", nargs="+", metavar="KEY:MS",
                   help="rank by goodput under this SLO, e.g. ttft:500,tpot:50")
    g.add_argument("--max-batch", type=int, metavar="B", help="most sequences decoding at once (default: the "
                                                               "largest batch size the profile measured)")
    g.add_argument("--num-prompts", type=int, default=None, metavar="N", help="requests simulated per policy")
    g.add_argument("--output-len", type=int, metavar="N", help="tokens each request asks for (default: its own)")
    g.add_argument("--seed", type=int, default=0, metavar="S")


def strict(obj):
    """`obj` with every non-finite number as None: JSON that any parser reads (a rate of inf, a TPOT of no
    request)."""
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _load(path, acceptance_from: str | None = None):
    from ppsd.profile import load_profile

    profile = load_profile(path)
    return profile.with_acceptance_from(load_profile(acceptance_from)) if acceptance_from else profile


def _slo(values):
    from sim.serve.metrics import Slo

    return Slo.parse(" ".join(values)) if values else None


def _config(profile, args):
    from sim.serve.costs import check_serving_profile
    from sim.serve.scheduler import SchedulerConfig

    if not profile.batch.measured:
        check_serving_profile(profile, 1)
    largest = max(profile.batch.sizes)
    max_batch = largest if args.max_batch is None else int(args.max_batch)
    if max_batch > largest:
        raise UserError(f"--max-batch {max_batch} is above the largest batch size profile {profile.path} measured "
                        f"({', '.join(map(str, profile.batch.sizes))}); it is not extrapolated",
                        f"give --max-batch {largest} or less, or measure more: ppsd profile add-batch {profile.path} "
                        f"--batch-sizes {','.join(map(str, sorted(set(profile.batch.sizes) | {max_batch})))} --force")
    config = SchedulerConfig(max_batch=max_batch, max_tokens=getattr(args, "max_tokens", 2048),
                             prefill=getattr(args, "prefill", "prefill-first"))
    check_serving_profile(profile, config.max_batch)
    return config


def _workload(profile, args):
    from sim.serve.workload import (Workload, check_burstiness, check_rate, profile_prompts, read_trace,
                                    synthetic_workload, trace_workload)

    if args.workload:
        return Workload.load(args.workload)
    if args.num_prompts < 1:
        raise UserError(f"--num-prompts {args.num_prompts} must be at least 1", "give e.g. --num-prompts 200")
    prompts = profile_prompts(profile)
    check_burstiness(args.burstiness)
    if args.trace:
        rate = None if args.request_rate is None else check_rate(args.request_rate)
        cap = DEFAULT_TRACE_CAP if args.output_len is None else args.output_len
        return trace_workload(prompts, read_trace(args.trace), count=args.num_prompts, seed=args.seed, rate=rate,
                              start_s=args.trace_start, output_cap=cap, source=Path(args.trace).name)
    if args.request_rate is None:
        raise UserError("--serve needs an arrival process", "give --request-rate R (or --trace FILE, --workload FILE)")
    rate = args.request_rate if math.isinf(args.request_rate) and args.request_rate > 0 else check_rate(args.request_rate)
    return synthetic_workload(prompts, rate=rate, count=args.num_prompts, seed=args.seed, burstiness=args.burstiness,
                              output_tokens=args.output_len)


def _sweep_rates(text: str) -> list[float] | None:
    from sim.serve.workload import check_rate

    if text.strip().lower() == "auto":
        return None
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--sweep-rates {text!r} is not auto or a list of rates", "give e.g. --sweep-rates 0.1,0.2,0.4")
    if not rates:
        raise UserError("--sweep-rates is empty", "give auto or e.g. --sweep-rates 0.1,0.2,0.4")
    return [check_rate(r, "--sweep-rates") for r in rates]


def serve_cmd(args) -> int:
    """`ppsd simulate --serve`: every input checked before anything is simulated or written."""
    from sim.serve.policies import parse_policy
    from sim.serve.predict import predict_serving

    if args.profile is None or args.synthetic_layers is not None:
        raise UserError("--serve needs a measured profile with batch tables", "give --profile DIR")
    if args.replications < 0:
        raise UserError(f"--replications {args.replications} is negative", "give 0 or more")
    policy = parse_policy(args.policy)
    slo = _slo(args.goodput)
    profile = _load(args.profile, args.acceptance_from)
    config = _config(profile, args)
    policy.check(profile.num_layers)
    if args.sweep_rates:
        if args.trace or args.workload or args.workload_out:
            raise UserError("--sweep-rates draws its own workloads at each rate",
                            "drop --trace / --workload / --workload-out with it")
        return _sweep(profile, args, config, policy, slo, _sweep_rates(args.sweep_rates))
    workload = _workload(profile, args)
    pred = predict_serving(profile, workload, policy, config, replications=args.replications, seed=args.seed, slo=slo,
                           head=args.exit_head)
    doc = {**pred.to_json_dict(), "workload": _describe(workload), "config": _config_dict(config),
           "runs_real": policy.runs_real, "model": profile.model_id, "device": profile.device_name}
    if args.workload_out:
        workload.save(args.workload_out)
    if args.save_result:
        atomic_write_json(args.save_result, strict({**doc, "requests": [r.to_json_dict() for r in pred.run.records]}))
    if args.json:
        print(json.dumps(strict(doc)))
        return 0
    _print_run(profile, policy, workload, config, pred)
    return 0


def _describe(workload) -> dict:
    return {"source": workload.source, "requests": len(workload.requests), "rate": workload.rate,
            "burstiness": workload.burstiness, "seed": workload.seed, "notes": workload.notes}


def _config_dict(config) -> dict:
    return {"max_batch": config.max_batch, "max_tokens": config.max_tokens, "prefill": config.prefill.value}


def _line(label: str, value, band=None) -> str:
    text = f"{label:<40}{value:>12.2f}" if isinstance(value, float) else f"{label:<40}{value!s:>12}"
    return text + (f"   90% interval {band.lo:.2f}–{band.hi:.2f}" if band is not None and band.hi > band.lo else "")


def _print_run(profile, policy, workload, config, pred) -> None:
    m, bands = pred.run.metrics, pred.bands
    real = "ppsd serve runs it" if policy.runs_real else "simulated only"
    print(f"{profile.model_id} on {profile.device_name}: policy {policy.spec()} ({real}), max batch {config.max_batch}, "
          f"token budget {config.max_tokens}, {config.prefill.value}")
    print(f"workload: {len(workload.requests)} requests, {workload.source} arrivals at {workload.rate:g} req/s "
          f"(seed {workload.seed})" + "".join(f"; {n}" for n in workload.notes))
    print("=" * 16 + " Serving (simulated) " + "=" * 16)
    print(_line("Successful requests:", m.completed))
    print(_line("Duration (s):", m.duration_s))
    print(_line("Request throughput (req/s):", m.request_throughput))
    print(_line("Output token throughput (tok/s):", m.output_throughput))
    print(_line("Total token throughput (tok/s):", m.total_token_throughput))
    if m.request_goodput is not None:
        print(_line(f"Request goodput (req/s, {m.slo}):", m.request_goodput))
    if m.acceptance_rate is not None:
        print(_line("Acceptance rate:", m.acceptance_rate))
        print(_line("Mean accepted length (tokens/round):", m.mean_accepted_length))
    for name, title, key in (("ttft", "Time to First Token", "ttft"), ("tpot", "Time per Output Token (excl. 1st)",
                                                                       "tpot"),
                             ("itl", "Inter-token Latency", None), ("e2el", "End-to-end Latency", "e2e")):
        stats = getattr(m, f"{name}_ms")
        print(f"{'-' * 10}{title}{'-' * 10}")
        print(_line(f"Mean {name.upper()} (ms):", stats.mean))
        print(_line(f"Median {name.upper()} (ms):", stats.median, bands.get(f"{key}_p50_ms") if key else None))
        print(_line(f"P90 {name.upper()} (ms):", stats.p90))
        print(_line(f"P99 {name.upper()} (ms):", stats.p99, bands.get(f"{key}_p99_ms") if key else None))
    print("=" * 53)
    if pred.replications:
        print(f"90% intervals: {pred.replications} replications of this workload, each prompt's trace drawn from its "
              f"category's traced prompts and the set shifted together, every price × exp(cv·z) with cv "
              f"{pred.cost_cv:.3f} (the profile's cost doubt)")
    print(f"acceptance: {pred.run.acceptance}")


def _sweep(profile, args, config, policy, slo, rates) -> int:
    from sim.serve.sweep import load_sweep
    from sim.serve.workload import check_burstiness, profile_prompts

    check_burstiness(args.burstiness)
    if args.num_prompts < 1:
        raise UserError(f"--num-prompts {args.num_prompts} must be at least 1", "give e.g. --num-prompts 100")
    sweep = load_sweep(profile, [policy], config, prompts=profile_prompts(profile), rates=rates,
                       num_prompts=args.num_prompts, burstiness=args.burstiness, output_len=args.output_len,
                       replications=args.replications, seed=args.seed, slo=slo, head=args.exit_head)
    doc = {**sweep.to_json_dict(), "config": _config_dict(config), "model": profile.model_id}
    if args.save_result:
        atomic_write_json(args.save_result, strict(doc))
    if args.json:
        print(json.dumps(strict(doc)))
        return 0
    spec = policy.spec()
    if spec == "ar":
        print("the policy is AR: nothing to compare it with; give --policy SPEC")
    print(f"{profile.model_id}: {spec} against AR, {args.num_prompts} requests a rate, max batch {config.max_batch}"
          + (f" (AR's capacity {sweep.capacity:.3g} req/s)" if sweep.capacity else ""))
    print(f"{'req/s':>8} {'AR p50 TPOT':>12} {'p50 TPOT':>10} {'90% interval':>15} {'AR p99 TPOT':>12} {'p99 TPOT':>10}"
          f" {'p50 E2E':>10}")
    for i, rate in enumerate(sweep.rates):
        ar, me = sweep.predictions["ar"][i].bands, sweep.predictions[spec][i].bands
        b = me["tpot_p50_ms"]
        print(f"{rate:>8.3g} {ar['tpot_p50_ms'].point:>12.1f} {b.point:>10.1f} {b.lo:>7.1f}–{b.hi:<7.1f} "
              f"{ar['tpot_p99_ms'].point:>12.1f} {me['tpot_p99_ms'].point:>10.1f} {me['e2e_p50_ms'].point:>10.0f}")
    for c in sweep.crossovers.get(spec, {}).values():
        print(c.words())
    return 0


def plan_rate_cmd(args) -> int:
    """`ppsd plan --rate R`: the serving policies ranked at one load, the chosen one as config."""
    from sim.serve.planner import PLAN_REQUESTS, plan_serving
    from sim.serve.workload import check_burstiness, check_rate, profile_prompts

    rate = check_rate(args.rate, "--rate")
    burstiness = check_burstiness(args.burstiness)
    slo = _slo(args.slo)
    num = PLAN_REQUESTS if args.num_prompts is None else int(args.num_prompts)
    if num < 1:
        raise UserError(f"--num-prompts {num} must be at least 1", "give e.g. --num-prompts 100")
    profile = _load(args.profile, args.acceptance_from)
    config = _config(profile, args)
    heads = args.exit_head or ["shared"]
    if len(heads) > 1:
        raise UserError("--rate plans with one exit head", "give one --exit-head (shared or trained)")
    plan = plan_serving(profile, profile_prompts(profile), rate, config, burstiness=burstiness, slo=slo,
                        num_prompts=num, output_len=args.output_len, seed=args.seed, head=heads[0])
    if args.json:
        print(json.dumps(strict(plan.to_json_dict())))
        return 0
    print(f"{profile.model_id} on {profile.device_name} at {rate:g} req/s (burstiness {burstiness:g}), max batch "
          f"{config.max_batch}: policies ranked by {plan.ranked_by}" + (f" under SLO {slo.spec()}" if slo else ""))
    good = " goodput" if slo else ""
    print(f"{'rank':>4}  {'policy':<28} {'TTFT p50':>9} {'TPOT p50':>9} {'TPOT p99':>9} {'E2E p50':>9} {'E2E p99':>9}"
          f"{good:>9}  (ms{', req/s' if slo else ''})")
    for i, row in enumerate(plan.rows[: args.top], 1):
        h = row.run.headline
        g = f" {row.run.metrics.request_goodput:>8.3f}" if slo else ""
        print(f"{i:>4}  {row.policy.spec():<28} {h['ttft_p50_ms']:>9.0f} {h['tpot_p50_ms']:>9.1f} "
              f"{h['tpot_p99_ms']:>9.1f} {h['e2e_p50_ms']:>9.0f} {h['e2e_p99_ms']:>9.0f}{g}")
    for note in plan.notes:
        print(note)
    print(f"chosen: {plan.chosen.policy.spec()}; γ by live batch size: "
          + ", ".join(f"{b}→{g}" for b, g in plan.table.items()))
    for line in plan.config_lines():
        print("  " + line)
    return 0

