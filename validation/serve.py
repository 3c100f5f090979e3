"""`ppsd validate --serve`: the real serving loop measured against the simulator, out of sample, at several
loads and policies, in turns.

The loads are open-loop workloads of prompts the profile never traced: Poisson arrivals at each of
`--rates`, and a window of a trace (the Azure conversation trace by default: its arrival times and length
ratios, its clock stretched to `--trace-rate`). Each (policy, load) is predicted by the simulator
(`predict_serving` on the very `Workload` the real run replays: a point and 90% intervals) and measured:
one `ppsd serve` per policy runs on this machine (its engine pinned to one core), and `ppsd bench-serve`'s
client replays the workload against it over loopback on the chat endpoint (the server lays the prompt out
with the chat template, as the profiler encodes prompts), every request asking `ignore_eos` so it
generates its whole length, as the simulator assumes. At each load the policies take turns, their order
rotated from load to load, so they see the same minutes of the machine. Each request's greedy tokens are
then checked against AR alone on the same prompt (`outputs_match_ar`).

The folder (written whole or not at all; an existing one needs `--force`):

    serve_validation.json   out_of_sample, the loads and policies, and one row per (policy, load): policy,
                            load, rate, predicted_X (with predicted_X_lo / predicted_X_hi, the 90% interval)
                            and measured_X for X in ttft_p50_ms, tpot_p50_ms, tpot_p99_ms, e2e_p50_ms,
                            e2e_p99_ms, error_X_pct, outputs_match_ar, acceptance, each party's CPU share
    workloads/<load>.json   the workloads replayed (`Workload.load`, `ppsd bench-serve --workload`)
    runs/<load>.<policy>.json   each measured run: per-request timings (bench-serve's --save-result form)
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ppsd.errors import UserError
from ppsd.statistics import percent_error
from ppsd.validation_folder import SERVE_JSON_FILE as JSON_FILE

HEADLINE = ("ttft_p50_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms", "e2e_p99_ms")
ENDPOINT = "/v1/chat/completions"
LOAD_FRACTIONS = (0.3, 0.9)  # default Poisson rates, as fractions of AR's estimated capacity
TRACE_FRACTION = 0.6  # the default trace window's rate, likewise
SERVER_START_S = 300.0
REPLICATIONS = 20


def headline(metrics) -> dict[str, float]:
    """The five figures a serving validation compares (ms), from a `ServeMetrics`."""
    return {"ttft_p50_ms": metrics.ttft_ms.median, "tpot_p50_ms": metrics.tpot_ms.median,
            "tpot_p99_ms": metrics.tpot_ms.p99, "e2e_p50_ms": metrics.e2el_ms.median, "e2e_p99_ms": metrics.e2el_ms.p99}


@dataclass(frozen=True)
class Load:
    """A workload the policies are measured on: a Poisson rate or a trace window."""

    name: str
    kind: str  # "poisson" or "trace"
    workload: object  # sim.serve.workload.Workload

    @property
    def rate(self) -> float:
        return float(self.workload.rate)

    def to_json_dict(self) -> dict:
        w = self.workload
        return {"name": self.name, "kind": self.kind, "rate": self.rate, "requests": len(w.requests),
                "span_s": w.duration_s, "workload": f"workloads/{self.name}.json", "notes": list(w.notes)}


@dataclass
class ServeRow:
    """One policy at one load: predicted (point and interval) beside measured."""

    policy: str
    load: str
    rate: float
    requests: int
    completed: int
    predicted: dict[str, tuple[float, float, float]]  # X -> (point, lo, hi)
    measured: dict[str, float]
    outputs_match_ar: bool | None
    mismatched_requests: list[int] = field(default_factory=list)
    predicted_acceptance: float | None = None
    measured_acceptance: float | None = None
    cpu_share: dict = field(default_factory=dict)
    run: str = ""
    speed: tuple[float, float] | None = None  # the machine's step now / profiled, before and after the run
    profile_predicted: dict[str, float] | None = None  # with --retime: the points the profile's own prices gave

    def to_json_dict(self) -> dict:
        d = {"policy": self.policy, "load": self.load, "rate": self.rate, "requests": self.requests,
             "completed": self.completed}
        for x in HEADLINE:
            point, lo, hi = self.predicted[x]
            d.update({f"predicted_{x}": point, f"predicted_{x}_lo": lo, f"predicted_{x}_hi": hi,
                      f"measured_{x}": self.measured[x], f"error_{x}_pct": _error(point, self.measured[x])})
        d.update(outputs_match_ar=self.outputs_match_ar, mismatched_requests=self.mismatched_requests,
                 predicted_acceptance=self.predicted_acceptance, measured_acceptance=self.measured_acceptance,
                 cpu_share=self.cpu_share, run=self.run)
        if self.speed is not None:
            d["machine_speed"] = {"before": self.speed[0], "after": self.speed[1]}
        if self.profile_predicted is not None:
            d.update({f"profile_predicted_{x}": v for x, v in self.profile_predicted.items()})
        return d

    @classmethod
    def from_prediction(cls, policy: str, load: "Load", pred, measured, outputs_match_ar: bool | None,
                        mismatched_requests: list[int] | None = None, cpu_share: dict | None = None,
                        run: str = "", speed: tuple[float, float] | None = None,
                        profile_predicted=None) -> "ServeRow":
        """The row of `policy` (its spec) at `load`: the simulator's `ServePrediction` beside the measured run's
        `ServeMetrics`; with `profile_predicted` (the prediction from the profile's own prices, when `pred` is
        priced at the machine's speed) its points kept beside."""
        return cls(policy, load.name, load.rate, len(load.workload.requests), measured.completed,
                   {x: (pred.bands[x].point, pred.bands[x].lo, pred.bands[x].hi) for x in HEADLINE},
                   headline(measured), outputs_match_ar, list(mismatched_requests or []),
                   pred.run.metrics.acceptance_rate, measured.acceptance_rate, dict(cpu_share or {}), run, speed,
                   None if profile_predicted is None else {x: profile_predicted.bands[x].point for x in HEADLINE})

    def covered(self, x: str) -> bool:
        _, lo, hi = self.predicted[x]
        return lo <= self.measured[x] <= hi


def _error(predicted: float, measured: float) -> float | None:
    if not (math.isfinite(predicted) and math.isfinite(measured)) or measured == 0:
        return None
    return percent_error(predicted, measured)


# --- the settings -------------------------------------------------------------------------------------------

@dataclass
class ServeSettings:
    """What `ppsd validate --serve` was asked, checked before anything loads."""

    profile: str
    model: str | None
    policies: str | None
    rates: list[float] | None
    trace: str | None
    trace_start: float
    trace_rate: float | None
    num_prompts: int
    output_len: int | None
    max_batch: int
    max_tokens: int
    replications: int
    prompts: str | None
    out: Path
    force: bool
    seed: int
    json: bool
    retime: bool = False

    @classmethod
    def from_args(cls, args) -> "ServeSettings":
        from sim.serve.workload import check_rate

        if not args.profile:
            raise UserError("--serve needs --profile", "give the profile folder the simulator predicts from")
        rates = None
        if args.rates:
            try:
                rates = [float(r) for r in str(args.rates).split(",") if r.strip()]
            except ValueError:
                raise UserError(f"--rates {args.rates} is not a list of numbers", "give e.g. --rates 0.5,2") from None
            for r in rates:
                check_rate(r, "--rates")
        if args.trace_rate is not None:
            check_rate(args.trace_rate, "--trace-rate")
        if args.num_prompts < 2:
            raise UserError(f"--num-prompts {args.num_prompts} must be at least 2", "give e.g. --num-prompts 32")
        if args.replications < 0:
            raise UserError(f"--replications {args.replications} must be 0 or more", "give e.g. --replications 20")
        if args.output_len is not None and args.output_len < 1:
            raise UserError(f"--output-len {args.output_len} must be at least 1", "give e.g. --output-len 64")
        out = Path(args.out or f"runs/serve-validation-{_dt.datetime.now():%Y%m%d-%H%M%S}")
        if out.exists() and not args.force:
            raise UserError(f"{out} exists", "give another --out, or --force to replace it")
        return cls(str(args.profile), args.model, args.policies, rates, args.trace, float(args.trace_start),
                   args.trace_rate, int(args.num_prompts), args.output_len, int(args.max_batch), int(args.max_tokens),
                   int(args.replications), args.prompts, out, bool(args.force), int(args.seed), bool(args.json),
                   bool(args.retime))


def default_policies(profile) -> str:
    """AR, the best EESD plan at batch 1, and goodput at its exit layer."""
    from ppsd.modes import Mode
    from sim.batch.sweep import rank

    best = rank(profile, 1, schemes=(Mode.EESD,), replay_top=16)[0]
    return f"ar;eesd:{best.exit_layer}:{best.draft_len};goodput:{best.exit_layer}"


def ar_capacity(profile, max_batch: int, prompt_tokens: float, output_len: int) -> float:
    """Requests a second AR serves at `max_batch` live sequences, prefill first: a batch's prompts prefilled one
    after another, then `output_len` steps at the median width. The scale the default loads are set on."""
    from sim.batch.costs import batch_costs

    step_ms = batch_costs(profile).ar_step(max_batch, prompt_tokens + output_len / 2)
    return max_batch * 1000.0 / (max_batch * profile.prefill_ms(prompt_tokens) + output_len * step_ms)


def _round_rate(rate: float) -> float:
    return float(f"{rate:.2g}")


# --- the workloads ------------------------------------------------------------------------------------------

def unseen_prompts(profile, prompts_file: str | None, model) -> list:
    """The prompts of `prompts_file` the profile never traced (by id or text), with their token counts as the
    chat template lays them out -> [PromptInfo]."""
    from ppsd.prompts import load_prompts
    from sim.serve.workload import PromptInfo

    seen = {str(p) for p in profile.acceptance["prompt_id"].unique()} if profile.acceptance is not None else set()
    seen |= {str(g.get("prompt", "")) for g in profile.generations()} - {""}
    prompts = [p for p in load_prompts(None if prompts_file == "builtin" else (prompts_file or "spec-bench"))
               if str(p.prompt_id) not in seen and p.text not in seen]
    if not prompts:
        raise UserError("every prompt of the prompt set was traced by the profile", "give --prompts FILE of new prompts")
    return [PromptInfo(str(p.prompt_id), p.category, len(model.encode_prompt(p.text)), p.text) for p in prompts]


def trace_rows(settings: ServeSettings) -> tuple[str, list] | None:
    """The trace the window comes from, read (a malformed one is refused here); None with `--trace none`."""
    from ppsd.paths import AZURE_CONV_TRACE
    from sim.serve.workload import read_trace

    if settings.trace == "none":
        return None
    trace = settings.trace or str(AZURE_CONV_TRACE)
    return Path(trace).name, read_trace(trace)


def build_loads(settings: ServeSettings, profile, prompts: list, output_len: int, trace) -> list[Load]:
    """Poisson loads at each rate and the trace window (default rates from AR's estimated capacity)."""
    import numpy as np

    from sim.serve.workload import synthetic_workload, trace_workload

    capacity = ar_capacity(profile, settings.max_batch, float(np.median([p.prompt_tokens for p in prompts])),
                           output_len)
    rates = settings.rates or [_round_rate(f * capacity) for f in LOAD_FRACTIONS]
    loads = [Load(f"poisson-{r:g}", "poisson", synthetic_workload(prompts, rate=r, count=settings.num_prompts,
                                                                   seed=settings.seed + i, output_tokens=output_len))
             for i, r in enumerate(rates)]
    if trace is not None:
        name, rows = trace
        rate = settings.trace_rate or _round_rate(TRACE_FRACTION * capacity)
        w = trace_workload(prompts, rows, count=settings.num_prompts, seed=settings.seed, rate=rate,
                           start_s=settings.trace_start, output_cap=output_len, source=name)
        loads.append(Load(f"trace-{rate:g}", "trace", w))
    return loads


# --- the machine's speed ---------------------------------------------------------------------------------------

SPEED_REPEATS = 30  # decode steps timed per speed check (~2 s for SmolLM2-135M on a CPU)
SPEED_WARN = 0.10  # a check this far from the profile's step, or a run's two checks this far apart, is warned of


class SpeedCheck:
    """The machine's speed against the profile's, taken in this process between runs (the servers idle) on the
    engine's core: a batch-1 AR decode step's pieces timed as the profiler times them
    (`profiler.piece_times.time_pieces`), their sum now over the profile's. A served run's latency moves with
    the machine's speed, and more than in proportion near saturation, so each run is read against its own."""

    def __init__(self, profile, model):
        self.profile, self.model = profile, model

    def take(self, core: int | None) -> float:
        from profiler.piece_times import time_pieces

        allowed = os.sched_getaffinity(0)
        if core is not None and core in allowed:
            os.sched_setaffinity(0, {core})  # where the engine runs; this thread only
        try:
            got = time_pieces(self.profile, self.model, None, repeats=SPEED_REPEATS)
        finally:
            os.sched_setaffinity(0, allowed)
        return got.step_scale


def run_speed(before: float, after: float) -> float:
    """The machine's speed over a run: the geometric mean of the checks either side of it."""
    return math.sqrt(before * after)


def speed_warnings(speeds: dict, retimed: bool) -> list[str]:
    """One line per run whose machine ran off the profile's step, or moved under it, by more than SPEED_WARN."""
    priced = ("it is priced at the machine's speed over the run (--retime)" if retimed else
              "it is priced at the profile's speed (--retime prices each run at the machine's)")
    out = []
    for (load, spec), (before, after) in speeds.items():
        if max(abs(before - 1.0), abs(after - 1.0), abs(after / before - 1.0)) > SPEED_WARN:
            out.append(f"warning: the machine's decode step ran {100 * (before - 1):+.0f}% before and "
                       f"{100 * (after - 1):+.0f}% after {spec} at {load} against the profile's; {priced}")
    return out


# --- the servers ----------------------------------------------------------------------------------------------

class ServerProcess:
    """One `ppsd serve` on a free loopback port, its log in `log_dir`."""

    def __init__(self, model: str, policy: str, profile: str, max_batch: int, max_tokens: int, log_dir: Path):
        from ppsd.net import free_port
        from ppsd.paths import PROJECT_ROOT

        self.policy, self.port = policy, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / f"server-{len(list(log_dir.glob('server-*.log')))}.log"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
               "HF_HUB_OFFLINE": "1"}
        self._log_fh = open(self.log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "ppsd", "serve", "--model", model, "--policy", policy,
                                      "--profile", profile, "--max-batch", str(max_batch), "--max-tokens",
                                      str(max_tokens), "--port", str(self.port)],
                                     stdout=self._log_fh, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout_s: float = SERVER_START_S) -> None:
        import httpx2

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise UserError(f"ppsd serve --policy {self.policy} exited ({self.proc.returncode}): "
                                f"{_last_line(self.log)}", "run that ppsd serve command alone to see why")
            try:
                if httpx2.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx2.HTTPError:
                time.sleep(0.5)
        raise UserError(f"ppsd serve --policy {self.policy} did not answer in {timeout_s:.0f} s",
                        "check the machine's load, then rerun")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log_fh.close()


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


# --- the run ----------------------------------------------------------------------------------------------------

def run_serve_validation(args, predictor=None) -> int:
    """The whole validation (see the module doc); `predictor` stands in for `predict_serving` (tests)."""
    from ppsd.paths import atomic_dir
    from ppsd.profile import load_profile
    from sim.batch.costs import check_batch
    from sim.serve.policies import parse_policies
    from sim.serve.scheduler import SchedulerConfig

    settings = ServeSettings.from_args(args)
    profile = load_profile(settings.profile)
    if settings.retime and profile.kind != "measured":
        raise UserError(f"--retime times this machine's decode step against a measured profile, and "
                        f"{settings.profile} is {profile.kind}", "drop --retime, or give a measured profile")
    config = SchedulerConfig(max_batch=settings.max_batch, max_tokens=settings.max_tokens)
    check_batch(profile, settings.max_batch)
    policies = parse_policies(settings.policies or default_policies(profile))
    _check_policies(policies, profile, config)
    model_spec = settings.model or str(profile.meta["model"]["id"])
    predictor = predictor or _predict_serving()
    trace = trace_rows(settings)
    model = _load_model(model_spec)
    output_len = settings.output_len or int((profile.meta.get("acceptance") or {}).get("max_new_tokens") or 64)
    prompts = unseen_prompts(profile, settings.prompts, model)
    loads = build_loads(settings, profile, prompts, output_len, trace)
    predictions = _predict(predictor, profile, loads, policies, config, settings)
    _say_expected_duration(predictions, loads, policies, profile, prompts, output_len)
    with atomic_dir(settings.out, overwrite=settings.force) as tmp:
        (tmp / "workloads").mkdir()
        (tmp / "runs").mkdir()
        for load in loads:
            load.workload.save(tmp / "workloads" / f"{load.name}.json")
        measured, speeds = _measure(settings, model_spec, policies, loads, predictions, tmp, SpeedCheck(profile, model))
        for line in speed_warnings(speeds, settings.retime):
            print(line, file=sys.stderr, flush=True)
        retimed = _retimed(predictor, profile, loads, policies, config, settings, speeds) if settings.retime else None
        rows = _rows(model, policies, loads, predictions, measured, speeds, retimed)
        doc = validation_document(settings, profile, model_spec, policies, loads, rows, prompts, output_len, config)
        doc["machine_speed"] = speed_summary(speeds, settings.retime)
        from ppsd.paths import atomic_write_json

        atomic_write_json(tmp / JSON_FILE, doc)
    _report(doc, rows, settings)
    return 0


def _predict_serving():
    from sim.serve.predict import predict_serving

    return predict_serving


def _load_model(spec: str):
    import torch

    from runtime.llm import load_model

    torch.set_num_threads(1)
    return load_model(spec)


def _check_policies(policies, profile, config) -> None:
    from runtime.serve.engine import check_policy

    for policy in policies:
        check_policy(policy, profile.num_layers, config, _cost(profile))


def _cost(profile):
    from sim.batch.costs import batch_costs

    return batch_costs(profile)


def _predict(predictor, profile, loads, policies, config, settings) -> dict:
    got = {}
    for load in loads:
        for policy in policies:
            print(f"validate --serve: predicting {policy.spec()} at {load.name}", file=sys.stderr, flush=True)
            got[(load.name, policy.spec())] = predictor(profile, load.workload, policy, config,
                                                        replications=settings.replications, seed=settings.seed)
    return got


def _retimed(predictor, profile, loads, policies, config, settings, speeds) -> dict:
    """Each (load, policy) predicted again with every price times the machine's speed over its run."""
    got = {}
    for load in loads:
        for policy in policies:
            speed = run_speed(*speeds[(load.name, policy.spec())])
            print(f"validate --serve: predicting {policy.spec()} at {load.name} at the machine's speed "
                  f"({100 * (speed - 1):+.1f}% against the profile)", file=sys.stderr, flush=True)
            got[(load.name, policy.spec())] = predictor(profile, load.workload, policy, config,
                                                        replications=settings.replications, seed=settings.seed,
                                                        speed=speed)
    return got


def speed_summary(speeds: dict, retimed: bool) -> dict:
    """serve_validation.json's `machine_speed`: how it is taken, and its range over the run."""
    flat = [v for pair in speeds.values() for v in pair]
    return {"method": f"before and after every run: a batch-1 AR decode step's pieces timed {SPEED_REPEATS} times in "
                      "the validating process on the engine's core (profiler/piece_times.py), now over the profile's",
            "retimed": bool(retimed), "min": min(flat) if flat else None, "max": max(flat) if flat else None}


def _say_expected_duration(predictions, loads, policies, profile, prompts, output_len) -> None:
    """Up front: the runs (each predicted run's span, plus a pause), the servers' start, the AR references."""
    runs_s = sum(p.run.metrics.duration_s + 2.0 for p in predictions.values())
    distinct = len({r.prompt_id for load in loads for r in load.workload.requests})
    step_ms = _cost(profile).ar_step(1, float(sum(p.prompt_tokens for p in prompts) / len(prompts)) + output_len / 2)
    ar_s = distinct * output_len * step_ms / 1000.0
    start_s = 15.0 * len(policies)
    total = runs_s + ar_s + start_s
    print(f"validate --serve: {len(policies)} policies × {len(loads)} loads; expected duration about "
          f"{total / 60:.1f} min (runs {runs_s / 60:.1f} min as predicted, AR references {ar_s / 60:.1f} min, "
          f"servers' start {start_s / 60:.1f} min)", file=sys.stderr, flush=True)


def _measure(settings, model_spec, policies, loads, predictions, folder: Path, check: SpeedCheck) -> tuple[dict, dict]:
    """Every (load, policy) measured, the policies in turns at each load (order rotated from load to load), the
    machine's speed checked before and after each run -> ({(load, spec): (result, run file)}, {(load, spec):
    (speed before, speed after)})."""
    from runtime.serve.loadgen import run_bench, server_stats
    from ppsd.paths import atomic_write_json

    servers = {}
    try:
        for policy in policies:
            servers[policy.spec()] = ServerProcess(model_spec, policy.spec(), settings.profile, settings.max_batch,
                                                   settings.max_tokens, folder)
        for server in servers.values():
            server.wait_ready()
        got, speeds = {}, {}
        cores = {spec: (server_stats(server.url) or {}).get("engine_core") for spec, server in servers.items()}
        for i, load in enumerate(loads):
            order = policies[i % len(policies):] + policies[: i % len(policies)]
            for policy in order:
                spec = policy.spec()
                bound = max(60.0, 3.0 * predictions[(load.name, spec)].run.metrics.duration_s + 30.0)
                print(f"validate --serve: measuring {spec} at {load.name} ({len(load.workload.requests)} requests over "
                      f"{load.workload.duration_s:.1f} s, at most {bound:.0f} s)", file=sys.stderr, flush=True)
                before = check.take(cores[spec])
                result = run_bench(load.workload, servers[spec].url, ENDPOINT, ignore_eos=True, max_duration_s=bound)
                speeds[(load.name, spec)] = (before, check.take(cores[spec]))
                print(f"  machine's step against the profile's: {100 * (before - 1):+.1f}% before, "
                      f"{100 * (speeds[(load.name, spec)][1] - 1):+.1f}% after", file=sys.stderr, flush=True)
                name = f"runs/{load.name}.{_slug(spec)}.json"
                atomic_write_json(folder / name, {k: v for k, v in result.to_json_dict().items() if k != "workload"})
                got[(load.name, spec)] = (result, name)
                time.sleep(1.0)
    finally:
        for server in servers.values():
            server.stop()
    return got, speeds


def _slug(spec: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in spec)


def _rows(model, policies, loads, predictions, measured, speeds, retimed=None) -> list[ServeRow]:
    print("validate --serve: checking every request's output against AR alone", file=sys.stderr, flush=True)
    reference = _ar_references(model, loads, measured)
    rows = []
    for load in loads:
        texts = {r.request_id: r for r in load.workload.requests}
        for policy in policies:
            spec = policy.spec()
            result, name = measured[(load.name, spec)]
            own = predictions[(load.name, spec)]
            pred = retimed[(load.name, spec)] if retimed is not None else own
            mismatched, checked = mismatches(result.results, texts, reference)
            match = (not mismatched) if checked else None
            rows.append(ServeRow.from_prediction(spec, load, pred, result.metrics, match, mismatched,
                                                 result.cpu_share, name, speeds.get((load.name, spec)),
                                                 own if retimed is not None else None))
    return rows


def mismatches(results, requests: dict, reference: dict[str, list[int]]) -> tuple[list[int], int]:
    """(the completed requests whose tokens are not AR's alone for their prompt, how many were checked):
    `requests` by id, `reference` each prompt's AR tokens (at least as long as any request of it)."""
    bad, checked = [], 0
    for r in results:
        if r.timing.ok and r.token_ids is not None:
            checked += 1
            want = reference[requests[r.timing.request_id].prompt_id]
            if len(r.token_ids) > len(want) or r.token_ids != want[: len(r.token_ids)]:
                bad.append(r.timing.request_id)
    return bad, checked


def _ar_references(model, loads, measured) -> dict[str, list[int]]:
    """Each prompt's greedy AR output alone, as long as the longest request that sent it (EOS ignored)."""
    from runtime.acceptance import Sampler
    from runtime.decoding import generate_ar

    longest, texts = {}, {}
    for load in loads:
        for r in load.workload.requests:
            longest[r.prompt_id] = max(longest.get(r.prompt_id, 0), r.output_tokens)
            texts[r.prompt_id] = r.text
    return {pid: generate_ar(model, model.encode_prompt(texts[pid]), n, Sampler.make(0, 0)).tokens
            for pid, n in longest.items()}


def validation_document(settings, profile, model_spec, policies, loads, rows, prompts, output_len, config) -> dict:
    """serve_validation.json's content (the module doc) from the run's settings, loads and rows."""
    from ppsd.paths import display_path

    covered = [r.covered(x) for r in rows for x in HEADLINE if math.isfinite(r.measured[x])]
    errors = {x: [abs(e) for e in (_error(r.predicted[x][0], r.measured[x]) for r in rows) if e is not None]
              for x in HEADLINE}
    traced = set(profile.acceptance["prompt_id"].astype(str)) if profile.acceptance is not None else set()
    measured_ids = sorted({r.prompt_id for load in loads for r in load.workload.requests})
    return {"schema_version": 1, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "profile": display_path(settings.profile), "model": model_spec,
            "device_name": str(profile.meta.get("hardware", {}).get("device_name", "")),
            "out_of_sample": not (traced & set(measured_ids)), "measured_prompts": settings.prompts or "spec-bench",
            "measured_prompt_ids": measured_ids, "overlapping_prompt_ids": sorted(traced & set(measured_ids)),
            "endpoint": ENDPOINT, "ignore_eos": True, "max_batch": config.max_batch, "max_tokens": config.max_tokens,
            "prefill": config.prefill.value, "output_len": output_len, "replications": settings.replications,
            "interval_level": 0.9, "seed": settings.seed, "policies": [p.spec() for p in policies],
            "loads": [load.to_json_dict() for load in loads], "rows": [r.to_json_dict() for r in rows],
            "summary": {"outputs_match_ar": all(r.outputs_match_ar for r in rows),
                        "coverage": sum(covered) / len(covered) if covered else None,
                        **{f"median_abs_error_{x}_pct": (sorted(v)[len(v) // 2] if v else None)
                           for x, v in errors.items()}}}


def _report(doc: dict, rows: list[ServeRow], settings: ServeSettings) -> None:
    if settings.json:
        from ppsd.output import print_json

        print_json(doc)
    else:
        print(f"{'policy':<22}{'load':<18}" + "".join(f"{x.replace('_ms', ''):>22}" for x in HEADLINE) + f"{'lossless':>10}")
        for r in rows:
            cells = "".join(f"{r.predicted[x][0]:>10.1f}/{r.measured[x]:<10.1f} " for x in HEADLINE)
            print(f"{r.policy:<22}{r.load:<18}{cells}{str(r.outputs_match_ar):>10}")
        s = doc["summary"]
        cov = "n/a" if s["coverage"] is None else f"{s['coverage']:.0%}"
        print(f"predicted/measured ms; 90% intervals cover {cov} of the measured figures; every request's output "
              f"identical to AR alone: {s['outputs_match_ar']}")
    print(f"validate --serve: written to {settings.out}", file=sys.stderr)
