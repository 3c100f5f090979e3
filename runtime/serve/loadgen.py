"""`ppsd bench-serve` (and `python -m bench.serve`): replay a workload against an OpenAI-compatible endpoint,
open loop, and measure what each request saw, as `vllm bench serve` does.

Each request is sent at its scheduled time whether or not earlier ones finished (an async HTTP client,
no connection limit), streamed, and timed on the client: its arrival is the moment it is sent, its first
token the first chunk that carries a token, each later such chunk one inter-token latency, its end the stream's
end. A chunk counts the tokens ppsd serve says it carries (`ppsd.tokens`), else one, and a request's
count is set to the server's `usage.completion_tokens` where it reports one, so TPOT is vLLM's
(E2E − TTFT) / (tokens − 1) against any server. The run is bounded in count (`--num-prompts`) and time
(`--max-duration`: nothing is sent after it and what still runs is cut off, counted as failed).

Prompt token counts come from the server's tokenizer: `POST /tokenize` (ppsd serve's and vLLM's route;
llama.cpp's `{"content"}` form is tried next); a server with neither leaves them 0, and says so.

On 2 cores the client, the HTTP loop and the engine share the machine: against a ppsd server on this
machine the client pins itself off the engine's core (the server reports it at `/ppsd/stats`), and the
result records the CPU share of the client, the server's HTTP loop and the engine over the run.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import resource
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

from ppsd.errors import UserError
from sim.serve.metrics import ServeMetrics, Slo, summarize
from sim.serve.requests import RequestTiming, ServeRequest
from sim.serve.workload import PromptInfo, Workload

DEFAULT_OUTPUT_LEN = 64
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class RequestResult:
    """One request as the client saw it, with what the server told of it (ppsd serve's token ids)."""

    timing: RequestTiming
    prompt_id: str = ""
    text: str = ""
    token_ids: list[int] | None = None
    send_lag_s: float = 0.0  # how late the client sent it against its schedule

    def to_json_dict(self) -> dict:
        return {**self.timing.to_json_dict(), "prompt_id": self.prompt_id, "send_lag_s": self.send_lag_s,
                "generated_text": self.text, "token_ids": self.token_ids}


@dataclass
class BenchResult:
    """A replay: each request's result, the vLLM-named summary, and the CPU share of each party."""

    base_url: str
    endpoint: str
    model: str
    workload: Workload
    results: list[RequestResult]
    metrics: ServeMetrics
    wall_s: float
    not_sent: int = 0
    cpu_share: dict = field(default_factory=dict)

    def to_json_dict(self) -> dict:
        lags = [r.send_lag_s for r in self.results]
        return {"base_url": self.base_url, "endpoint": self.endpoint, "model": self.model, "wall_s": self.wall_s,
                "not_sent": self.not_sent, "max_send_lag_ms": 1000 * max(lags) if lags else None,
                "cpu_share": self.cpu_share, "summary": self.metrics.to_json_dict(),
                "workload": self.workload.to_json_dict(), "requests": [r.to_json_dict() for r in self.results]}


# --- one request ---------------------------------------------------------------------------------------------

def _payload(endpoint: str, model: str, text: str, max_tokens: int, ignore_eos: bool) -> dict:
    body = {"model": model, "temperature": 0.0, "max_tokens": int(max_tokens), "stream": True,
            "stream_options": {"include_usage": True}}
    if is_chat(endpoint):
        body["messages"] = [{"role": "user", "content": text}]
        body["max_completion_tokens"] = int(max_tokens)
    else:
        body["prompt"] = text
    if ignore_eos:
        body["ignore_eos"] = True
    return body


def is_chat(endpoint: str) -> bool:
    return endpoint.rstrip("/").endswith("chat/completions")


def _chunk_text(obj: dict, chat: bool) -> str:
    choices = obj.get("choices") or []
    if not choices:
        return ""
    first = choices[0]
    return str((first.get("delta") or {}).get("content") or "") if chat else str(first.get("text") or "")


async def send_one(client, url: str, body: dict, result: RequestResult, clock, chat: bool) -> None:
    """Stream one request, recording each chunk's arrival into `result.timing` (on `clock()`)."""
    import httpx2

    timing, pieces, usage, counted = result.timing, [], None, False
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                raw = (await resp.aread()).decode(errors="replace")
                timing.error = f"HTTP {resp.status_code}: {_error_message(raw)}"
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = clock()
                obj = json.loads(data)
                if obj.get("error"):
                    timing.error = _error_message(json.dumps(obj))
                    return
                usage = (obj.get("usage") or {}).get("completion_tokens", usage)
                piece, extra = _chunk_text(obj, chat), obj.get("ppsd") or {}
                count = extra.get("tokens")
                counted = counted or count is not None
                count = (1 if piece else 0) if count is None else int(count)
                if count:
                    timing.deliver(now, count)
                pieces.append(piece)
                if "token_ids" in extra:
                    result.token_ids = [int(t) for t in extra["token_ids"]]
                    timing.drafted, timing.accepted = int(extra.get("drafted", 0)), int(extra.get("accepted", 0))
                    timing.rounds = int(extra.get("rounds", 0))
        timing.finish_s = clock()
    except (httpx2.HTTPError, ValueError, OSError) as exc:
        timing.error = f"{exc.__class__.__name__}: {exc}"
        return
    result.text = "".join(pieces)
    if usage and not counted and timing.token_counts and int(usage) > timing.output_tokens:
        timing.token_counts[-1] += int(usage) - timing.output_tokens  # the server counted more tokens than chunks
    if not timing.token_counts:
        timing.error = "the stream carried no tokens"


def _error_message(raw: str) -> str:
    try:
        obj = json.loads(raw)
        err = obj.get("error", obj)
        msg = err.get("message", raw) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        msg = raw
    return " ".join(str(msg).split())[:300]


# --- the replay ----------------------------------------------------------------------------------------------

async def _replay(workload: Workload, url: str, endpoint: str, model: str, ignore_eos: bool, max_duration_s: float,
                  timeout_s: float) -> tuple[list[RequestResult], int, float]:
    import httpx2

    chat = is_chat(endpoint)
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    results, tasks = [], []
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_s), limits=limits) as client:
        t0 = time.perf_counter()

        def clock() -> float:
            return time.perf_counter() - t0
        for req in workload.requests:
            if req.arrival_s > max_duration_s:
                break
            wait = req.arrival_s - clock()
            if wait > 0:
                await asyncio.sleep(wait)
            now = clock()
            result = RequestResult(RequestTiming(req.request_id, now, req.prompt_tokens), req.prompt_id,
                                   send_lag_s=max(0.0, now - req.arrival_s))
            results.append(result)
            body = _payload(endpoint, model, req.text, req.output_tokens, ignore_eos)
            tasks.append(asyncio.create_task(send_one(client, url, body, result, clock, chat)))
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(0.0, max_duration_s - clock()))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for result in results:
            if not result.timing.ok and not result.timing.error:
                result.timing.error = "cut off at --max-duration"
        return results, len(workload.requests) - len(results), clock()


def run_bench(workload: Workload, base_url: str, endpoint: str = "/v1/completions", *, model: str | None = None,
              ignore_eos: bool = False, max_duration_s: float = 600.0, timeout_s: float = 300.0,
              slo: Slo | None = None, pin: bool = True) -> BenchResult:
    """Replay `workload` against the server (see the module doc) -> the result."""
    base_url = base_url.rstrip("/")
    model = model or server_model(base_url)
    before = server_stats(base_url)
    cores = os.sched_getaffinity(0)
    if pin and before and before.get("engine_core") is not None and is_loopback(base_url):
        keep_off_core(int(before["engine_core"]))
    client_cores = sorted(os.sched_getaffinity(0))
    cpu0, wall0 = _process_cpu_s(), time.perf_counter()
    try:
        results, not_sent, _ = asyncio.run(_replay(workload, base_url + endpoint, endpoint, model, ignore_eos,
                                                   max_duration_s, timeout_s))
    finally:
        os.sched_setaffinity(0, cores)
    wall = time.perf_counter() - wall0
    share = {"client": (_process_cpu_s() - cpu0) / wall, "client_cores": client_cores}
    after = server_stats(base_url)
    if before and after:
        share["http_loop"] = (after["http_loop_cpu_s"] - before["http_loop_cpu_s"]) / wall
        share["engine"] = (after["engine_cpu_s"] - before["engine_cpu_s"]) / wall
        if after.get("stage_one_cpu_s") is not None and before.get("stage_one_cpu_s") is not None:
            share["stage_one"] = (after["stage_one_cpu_s"] - before["stage_one_cpu_s"]) / wall  # PPSD's stage 1
        share["engine_core"], share["http_cores"] = after.get("engine_core"), after.get("http_cores")
    metrics = summarize([r.timing for r in results], slo)
    return BenchResult(base_url, endpoint, model, workload, results, metrics, wall, not_sent, share)


def _process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def keep_off_core(core: int) -> None:
    """Pin this process's threads off the engine's core, where another core is left."""
    allowed = os.sched_getaffinity(0)
    if len(allowed - {core}) >= 1 and core in allowed:
        os.sched_setaffinity(0, allowed - {core})


def is_loopback(base_url: str) -> bool:
    return (urlparse(base_url).hostname or "") in LOOPBACK


# --- talking to the server -----------------------------------------------------------------------------------

def _get(base_url: str, path: str, timeout_s: float = 10.0):
    import httpx2

    return httpx2.get(base_url.rstrip("/") + path, timeout=timeout_s)


def server_model(base_url: str) -> str:
    """The first model the server lists; UserError when it cannot be reached."""
    import httpx2

    try:
        resp = _get(base_url, "/v1/models")
        resp.raise_for_status()
        return str(resp.json()["data"][0]["id"])
    except httpx2.ConnectError:
        raise UserError(f"cannot reach {base_url} (nothing listens there)",
                        "start a server first (e.g. ppsd serve --port 8000) or give --base-url") from None
    except (httpx2.HTTPError, ValueError, KeyError, IndexError) as exc:
        raise UserError(f"{base_url}/v1/models gave no model ({exc.__class__.__name__})",
                        "give --model NAME, or check --base-url") from None


def server_stats(base_url: str) -> dict | None:
    """ppsd serve's `/ppsd/stats` (None from another server)."""
    import httpx2

    try:
        resp = _get(base_url, "/ppsd/stats")
        return resp.json() if resp.status_code == 200 else None
    except (httpx2.HTTPError, ValueError):
        return None


async def _count_tokens(base_url: str, texts: list[str], chat: bool) -> list[int] | None:
    import httpx2

    async with httpx2.AsyncClient(timeout=30.0) as client:
        async def one(text: str) -> int | None:
            vllm = {"messages": [{"role": "user", "content": text}], "add_generation_prompt": True} if chat \
                else {"prompt": text}
            for body in (vllm, {"content": text}):
                try:
                    resp = await client.post(base_url + "/tokenize", json=body)
                    if resp.status_code == 200:
                        obj = resp.json()
                        return int(obj["count"]) if "count" in obj else len(obj["tokens"])
                except (httpx2.HTTPError, ValueError, KeyError, TypeError):
                    pass
            return None
        counts = []
        for start in range(0, len(texts), 32):
            counts += await asyncio.gather(*(one(t) for t in texts[start:start + 32]))
    return None if any(c is None for c in counts) else counts


def prompt_infos(base_url: str, prompts, endpoint: str) -> list[PromptInfo]:
    """The prompt set with each prompt's token count from the server's tokenizer (0 where it has none)."""
    counts = asyncio.run(_count_tokens(base_url.rstrip("/"), [p.text for p in prompts], is_chat(endpoint)))
    if counts is None:
        print(f"bench-serve: {base_url} has no /tokenize: prompt token counts are recorded as 0", file=sys.stderr)
        counts = [0] * len(prompts)
    return [PromptInfo(str(p.prompt_id), p.category, int(n), p.text) for p, n in zip(prompts, counts)]


# --- the command ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkloadSpec:
    """What the command line asks the workload to be, checked before anything is sent."""

    rate: float
    burstiness: float
    count: int
    output_len: int | None
    seed: int
    trace_rows: list | None = None
    trace_start: float = 0.0
    saved: Workload | None = None


def check_bench_args(args) -> tuple[WorkloadSpec, Slo | None]:
    """Every flag's one-line error before the server is contacted."""
    from sim.serve.workload import check_burstiness, check_rate, read_trace

    rate = float(args.request_rate)
    if not math.isinf(rate):
        check_rate(rate)
    check_burstiness(args.burstiness)
    if int(args.num_prompts) < 1:
        raise UserError(f"--num-prompts {args.num_prompts} must be at least 1", "give e.g. --num-prompts 100")
    if args.output_len is not None and int(args.output_len) < 1:
        raise UserError(f"--output-len {args.output_len} must be at least 1", "give e.g. --output-len 64")
    if not float(args.max_duration) > 0:
        raise UserError(f"--max-duration {args.max_duration} must be positive", "give e.g. --max-duration 600")
    if args.workload and args.trace:
        raise UserError("--workload and --trace both say when requests arrive", "give one of them")
    if not str(args.endpoint).startswith("/"):
        raise UserError(f"--endpoint {args.endpoint} is not a path", "give e.g. /v1/completions")
    slo = Slo.parse(" ".join(args.goodput)) if args.goodput else None
    rows = read_trace(args.trace) if args.trace else None
    saved = Workload.load(args.workload) if args.workload else None
    return WorkloadSpec(rate, float(args.burstiness), int(args.num_prompts), args.output_len, int(args.seed), rows,
                        float(args.trace_start), saved), slo


def build_workload(spec: WorkloadSpec, base_url: str, dataset: str, endpoint: str, trace_name: str = "trace") -> Workload:
    """The workload the command line asks for, its prompts counted by the server's tokenizer."""
    from ppsd.prompts import load_prompts
    from sim.serve.workload import synthetic_workload, trace_workload

    if spec.saved is not None:
        return spec.saved
    prompts = prompt_infos(base_url, load_prompts(None if dataset == "builtin" else dataset), endpoint)
    if spec.trace_rows is not None:
        rate = None if math.isinf(spec.rate) else spec.rate
        return trace_workload(prompts, spec.trace_rows, count=spec.count, seed=spec.seed, rate=rate,
                              start_s=spec.trace_start, output_cap=spec.output_len or DEFAULT_OUTPUT_LEN,
                              source=trace_name)
    return synthetic_workload(prompts, rate=spec.rate, count=spec.count, seed=spec.seed, burstiness=spec.burstiness,
                              output_tokens=spec.output_len or DEFAULT_OUTPUT_LEN)


def bench_command(args) -> int:
    """`ppsd bench-serve` (see the module doc)."""
    from ppsd.output import print_json
    from ppsd.paths import atomic_write_json

    spec, slo = check_bench_args(args)
    base_url = str(args.base_url).rstrip("/")
    model = args.model or server_model(base_url)
    workload = build_workload(spec, base_url, args.dataset, args.endpoint, args.trace or "trace")
    for note in workload.notes:
        print(f"bench-serve: {note}", file=sys.stderr)
    print(f"bench-serve: {len(workload.requests)} requests over {workload.duration_s:.1f} s to {base_url}{args.endpoint} "
          f"(at most {args.max_duration:g} s)", file=sys.stderr, flush=True)
    result = run_bench(workload, base_url, args.endpoint, model=model, ignore_eos=args.ignore_eos,
                       max_duration_s=float(args.max_duration), timeout_s=float(args.timeout), slo=slo)
    if args.save_result:
        atomic_write_json(args.save_result, result.to_json_dict())
        print(f"bench-serve: written to {args.save_result}", file=sys.stderr)
    if args.json:
        print_json({k: v for k, v in result.to_json_dict().items() if k not in ("workload", "requests")})
    else:
        print(format_result(result))
    return 0


def format_result(result: BenchResult) -> str:
    """vLLM's summary table."""
    m = result.metrics
    lines = ["{s:{c}^60}".format(s=" Serving Benchmark Result ", c="="),
             f"{'Successful requests:':<44}{m.completed:>16}", f"{'Failed requests:':<44}{m.failed:>16}",
             f"{'Not sent (past --max-duration):':<44}{result.not_sent:>16}",
             f"{'Benchmark duration (s):':<44}{m.duration_s:>16.2f}",
             f"{'Total input tokens:':<44}{m.total_input_tokens:>16}",
             f"{'Total generated tokens:':<44}{m.total_output_tokens:>16}",
             f"{'Request throughput (req/s):':<44}{m.request_throughput:>16.2f}",
             f"{'Output token throughput (tok/s):':<44}{m.output_throughput:>16.2f}",
             f"{'Total token throughput (tok/s):':<44}{m.total_token_throughput:>16.2f}"]
    if m.request_goodput is not None:
        lines.append(f"{f'Request goodput (req/s, {m.slo}):':<44}{m.request_goodput:>16.2f}")
    for name, title in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
                        ("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency")):
        stats = getattr(m, f"{name}_ms")
        lines.append("{s:{c}^60}".format(s=f" {title} ", c="-"))
        for key, value in (("Mean", stats.mean), ("Median", stats.median), ("P90", stats.p90), ("P99", stats.p99)):
            lines.append(f"{f'{key} {name.upper()} (ms):':<44}{value:>16.2f}")
    if m.acceptance_rate is not None:
        lines.append(f"{'Draft acceptance rate:':<44}{m.acceptance_rate:>16.3f}")
    share = result.cpu_share
    if share:
        parts = ", ".join(f"{k} {share[k]:.0%}" for k in ("client", "http_loop", "engine", "stage_one") if k in share)
        lines.append(f"{'CPU share (of one core):':<44}{parts:>16}")
    lines.append("=" * 60)
    return "\n".join(lines)
