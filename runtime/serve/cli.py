"""`ppsd serve` and `ppsd bench-serve`. No torch, FastAPI or HTTP client at import time: the handlers import
them lazily."""

from __future__ import annotations

from runtime.serve.server import DEFAULT_PORT


def register(sub) -> None:
    s = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP endpoint with continuous batching "
                       "and a speculation policy",
                       description="Serve --model behind /v1/completions and /v1/chat/completions (streamed as "
                       "server-sent events), /v1/models, /health and /tokenize, on 127.0.0.1 by default. The "
                       "simulator's scheduler batches requests continuously (prefill first, FCFS, --max-batch); "
                       "--policy chooses what each iteration decodes. Greedy only. Ctrl-C stops it.")
    s.add_argument("--model", default="smollm2-135m", help="smollm2-135m (default), tiny-llama, a folder, a .gguf")
    s.add_argument("--policy", default="ar", metavar="SPEC", help="ar (default), eesd:E:γ, ppsd:E (two stage "
                   "processes), off-above:E:γ:B, table:E:1=4,2=3,4=0 or goodput:E[:γmax] (needs --profile)")
    s.add_argument("--profile", metavar="DIR", help="profile folder: goodput's batch costs, and the acceptance a "
                   "load-adaptive policy starts from")
    s.add_argument("--max-batch", type=int, default=8, help="most sequences decoding at once (default 8)")
    s.add_argument("--max-tokens", type=int, default=2048, help="token budget of one iteration (vLLM's "
                   "--max-num-batched-tokens; default 2048)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    s.add_argument("--heads", metavar="DIR", help="exit-head folder from `ppsd heads train`: draft with a trained head")
    s.add_argument("--exit-head", metavar="NAME", help="shared, trained (default with --heads) or vocab<V>")
    s.add_argument("--engine-core", type=int, default=None, metavar="N", help="the CPU core the engine thread is "
                   "pinned to (default: the last one; the HTTP loop gets the others; -1: no pinning)")
    s.add_argument("--served-model-name", help="the model's name in /v1/models and responses (default: its id)")
    s.add_argument("--dtype", default="float32")
    s.set_defaults(func=cmd_serve)

    b = sub.add_parser("bench-serve", help="replay a workload against an OpenAI-compatible endpoint and measure "
                       "TTFT, TPOT, ITL and E2E latency (as `vllm bench serve`)",
                       description="Open-loop load generator: each request is sent at its scheduled time whether or "
                       "not earlier ones finished, streamed, and timed chunk by chunk. Works against ppsd serve, "
                       "vLLM, llama.cpp's server or any OpenAI-compatible endpoint. Same as `python -m bench.serve`.")
    add_bench_arguments(b)
    b.set_defaults(func=cmd_bench_serve)


def add_bench_arguments(b) -> None:
    b.add_argument("--base-url", default=f"http://127.0.0.1:{DEFAULT_PORT}",
                   help=f"the server (default http://127.0.0.1:{DEFAULT_PORT})")
    b.add_argument("--endpoint", default="/v1/completions", help="/v1/completions (default) or /v1/chat/completions")
    b.add_argument("--model", help="the model name to send (default: the server's first in /v1/models)")
    b.add_argument("--request-rate", type=float, default=float("inf"),
                   help="requests a second (default inf: all at once); with --trace, the rate its clock is "
                        "stretched to (default: as recorded)")
    b.add_argument("--burstiness", type=float, default=1.0, help="Gamma shape of the gaps (1 = Poisson, default)")
    b.add_argument("--num-prompts", type=int, default=100, help="requests to send (default 100)")
    b.add_argument("--dataset", default="spec-bench", help="spec-bench (default), builtin, or a Spec-Bench-format "
                   "JSONL file")
    b.add_argument("--trace", metavar="FILE", help="arrival times and lengths from a trace (Azure CSV or JSONL)")
    b.add_argument("--trace-start", type=float, default=0.0, metavar="S", help="where the trace window starts (s)")
    b.add_argument("--workload", metavar="FILE", help="replay a saved workload (as `ppsd validate --serve` writes)")
    b.add_argument("--output-len", type=int, default=None, help="tokens each request asks for (default 64; with "
                   "--trace the cap on its scaled lengths)")
    b.add_argument("--ignore-eos", action="store_true", help="ask every request to generate its whole length")
    b.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLO for goodput, e.g. ttft:500 tpot:50")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--max-duration", type=float, default=600.0, metavar="S",
                   help="stop sending and cut off what is still running after S seconds (default 600)")
    b.add_argument("--timeout", type=float, default=300.0, metavar="S", help="one request's time limit (default 300)")
    b.add_argument("--save-result", metavar="FILE", help="write the per-request timings and the summary as JSON")
    b.add_argument("--json", action="store_true", help="print the summary as JSON alone on stdout")


def cmd_serve(args) -> int:
    from runtime.serve.server import serve_command

    return serve_command(args)


def cmd_bench_serve(args) -> int:
    from runtime.serve.loadgen import bench_command

    return bench_command(args)
