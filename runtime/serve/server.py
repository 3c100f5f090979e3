"""`ppsd serve`: the engine behind an OpenAI-compatible HTTP endpoint (FastAPI + uvicorn).

Routes: `POST /v1/completions` and `POST /v1/chat/completions` (streamed as server-sent events, `data:
{...}` chunks then `data: [DONE]`, or whole), `GET /v1/models`, `GET /health`, `POST /tokenize` (vLLM's
route and shape: a prompt or chat messages -> their token ids and count, what `ppsd bench-serve` counts
prompt tokens with) and `GET /ppsd/stats` (the engine's counters and the CPU time of the engine thread
and of the HTTP loop). Greedy only: a temperature other than 0 is refused in one line (no temperature
means 0). `ignore_eos` (vLLM's extension) makes a request generate its whole `max_tokens`.

Each chunk carries, beside OpenAI's fields, `ppsd.tokens` (the tokens it delivers: an EESD round delivers
several at once); a request's last chunk also carries its `token_ids` and the engine's drafts judged and
accepted and its rounds. Other clients ignore the extra field.

Threads: the engine runs on its own thread pinned to one core (torch at one thread); the HTTP event loop
runs on the main thread, pinned to the other cores; the engine hands each delivery to its request's
asyncio queue with `call_soon_threadsafe`. SIGINT stops the server: open streams get a few seconds, then
the engine stops and every request still there is aborted. Under `ppsd:E` the engine forks PPSD's stage 1
(`runtime/serve/pipeline.py`), pinned to one of the HTTP loop's cores; it ignores SIGINT and the engine stops it,
so no process is left.
"""


import asyncio
import json
import os
import resource
import socket
import sys
import time
import uuid

from ppsd.errors import UserError

DEFAULT_PORT = 8000
DEFAULT_CHAT_MAX_TOKENS = 256
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
GRACEFUL_SHUTDOWN_S = 3


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket, bound before the model loads so a taken port fails at once, in one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port)))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror or exc})",
                        "give another --port, or stop what listens there") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def split_cores(engine_core: int | None) -> tuple[int | None, set[int] | None]:
    """(the engine's core, the HTTP loop's cores): the engine gets the last core this process may use
    (or `engine_core`), the loop the rest; no pinning on one core, or with `engine_core` -1."""
    allowed = sorted(os.sched_getaffinity(0))
    if engine_core == -1 or len(allowed) < 2:
        return None, None
    core = allowed[-1] if engine_core is None else int(engine_core)
    if core not in allowed:
        raise UserError(f"--engine-core {core} is not one of this process's cores {allowed}",
                        f"give one of {allowed}, or -1 for no pinning")
    return core, set(allowed) - {core}


# --- requests ----------------------------------------------------------------------------------------------

class BadRequest(Exception):
    """A request the server refuses: 400 with OpenAI's error body, one line."""


def _number(body: dict, key: str, default, kind=float):
    value = body.get(key, default)
    if value is None:
        return default
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise BadRequest(f"{key} must be a number, got {value!r}") from None


def check_sampling(body: dict) -> None:
    temperature = _number(body, "temperature", 0.0)
    if temperature != 0:
        raise BadRequest(f"ppsd serve decodes greedily: temperature {temperature:g} is not served; send temperature 0")
    if _number(body, "n", 1, int) != 1:
        raise BadRequest("ppsd serve answers with one choice; send n 1")
    if body.get("stop"):
        raise BadRequest("ppsd serve has no stop strings (it stops at EOS or max_tokens); drop stop")
    if body.get("echo"):
        raise BadRequest("ppsd serve does not echo the prompt; drop echo")


def chat_ids(model, messages) -> list[int]:
    """Chat messages as the model's chat template lays them out, with the assistant's turn opened (the
    contents joined by newlines where the tokenizer has no template)."""
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest("messages must be a non-empty list of {role, content}")
    tok = model.tokenizer
    if getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template([{"role": str(m.get("role", "user")), "content": _content(m)} for m in messages],
                                      add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    return [int(i) for i in tok.encode("\n".join(_content(m) for m in messages))]


def _content(message: dict) -> str:
    content = message.get("content", "")
    if isinstance(content, list):  # OpenAI's content parts: the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def prompt_ids(model, prompt) -> list[int]:
    """A completion's prompt: text (encoded as the tokenizer encodes it) or token ids; one prompt only."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return [int(i) for i in model.tokenizer.encode(prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return [int(t) for t in prompt]
    raise BadRequest("prompt must be one string or one list of token ids")


class TextStream:
    """Token ids to text, incrementally: each call returns the new text (a partial character is held back)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.sent = tokenizer, [], 0

    def add(self, tokens, final: bool = False) -> str:
        self.ids += list(tokens)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not final and text.endswith("\ufffd"):
            return ""
        new, self.sent = text[self.sent:], len(text)
        return new


# --- the app -------------------------------------------------------------------------------------------------

class Api:
    """The routes' shared state: the engine, the model (its tokenizer, its name), the loop's start."""

    def __init__(self, engine, model, name: str):
        self.engine, self.model, self.name = engine, model, name
        self.started = time.time()

    def open(self, ids: list[int], max_tokens: int, ignore_eos: bool, prompt_id: str = ""):
        """Submit to the engine -> (request id, the asyncio queue its events arrive on)."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def push(event):
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the loop has closed: the server is stopping
                pass
        try:
            rid = self.engine.submit(ids, max_tokens, push, ignore_eos=ignore_eos, prompt_id=prompt_id)
        except UserError as exc:
            raise BadRequest(exc.one_line()) from None
        return rid, events


def _chunk(kind: str, rid: str, name: str, text: str, finish: str | None, extra: dict) -> dict:
    created = int(time.time())
    if kind == "chat":
        choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name, "choices": [choice],
                "ppsd": extra}
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {"id": rid, "object": "text_completion", "created": created, "model": name, "choices": [choice],
            "ppsd": extra}


def _finish_extra(event, tokens: list[int]) -> dict:
    t = event.timing
    return {"tokens": len(event.tokens), "token_ids": tokens, "drafted": t.drafted if t else 0,
            "accepted": t.accepted if t else 0, "rounds": t.rounds if t else 0}


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sse(obj) -> bytes:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


async def _events(api: Api, rid: int, events: asyncio.Queue):
    finished = False
    try:
        while True:
            event = await events.get()
            yield event
            if event.finished:
                finished = True
                return
    finally:
        if not finished:
            api.engine.cancel(rid)


async def _stream(api: Api, kind: str, ids: list[int], rid: int, events, include_usage: bool):
    from runtime.serve.engine import FinishReason

    oid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:16]}"
    text, tokens = TextStream(api.model.tokenizer), []
    if kind == "chat":
        first = _chunk(kind, oid, api.name, "", None, {"tokens": 0})
        first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
        yield _sse(first)
    async for event in _events(api, rid, events):
        if event.finish_reason in (FinishReason.ABORT, FinishReason.ERROR):
            yield _sse({"error": {"message": event.error or "aborted", "type": "server_error", "code": 500}})
            break
        tokens += event.tokens
        piece = text.add(event.tokens, final=event.finished)
        extra = _finish_extra(event, tokens) if event.finished else {"tokens": len(event.tokens)}
        finish = event.finish_reason.value if event.finished else None
        yield _sse(_chunk(kind, oid, api.name, piece, finish, extra))
        if event.finished and include_usage:
            usage = _chunk(kind, oid, api.name, "", None, {})
            usage["choices"], usage["usage"] = [], _usage(len(ids), len(tokens))
            yield _sse(usage)
    yield b"data: [DONE]\n\n"


async def _whole(api: Api, kind: str, ids: list[int], rid: int, events) -> dict:
    from runtime.serve.engine import FinishReason

    tokens, last = [], None
    async for event in _events(api, rid, events):
        tokens += event.tokens
        last = event
    if last.finish_reason in (FinishReason.ABORT, FinishReason.ERROR):
        raise RuntimeError(last.error or "aborted")
    text = api.model.tokenizer.decode(tokens, skip_special_tokens=True)
    oid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:16]}"
    if kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": last.finish_reason.value}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": last.finish_reason.value}
        obj = "text_completion"
    return {"id": oid, "object": obj, "created": int(time.time()), "model": api.name, "choices": [choice],
            "usage": _usage(len(ids), len(tokens)), "ppsd": _finish_extra(last, tokens)}


def _max_tokens(body: dict, kind: str, ids: list[int], context: int) -> int:
    default = COMPLETION_DEFAULT_MAX_TOKENS if kind == "completion" else min(DEFAULT_CHAT_MAX_TOKENS, context - len(ids))
    value = body.get("max_completion_tokens") if kind == "chat" and body.get("max_tokens") is None else None
    value = body.get("max_tokens") if value is None else value
    n = default if value is None else _number({"max_tokens": value}, "max_tokens", default, int)
    if n < 1:
        raise BadRequest(f"max_tokens {n} must be at least 1")
    return n


def build_app(api: Api):
    """The FastAPI app over `api`."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI(title="ppsd serve", docs_url=None, redoc_url=None, openapi_url=None)

    def error(message: str, status: int = 400) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}},
                            status_code=status)

    async def body_of(request: Request) -> dict:
        try:
            body = await request.json()
        except ValueError:
            raise BadRequest("the body is not JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    async def complete(request: Request, kind: str):
        try:
            body = await body_of(request)
            check_sampling(body)
            ids = chat_ids(api.model, body.get("messages")) if kind == "chat" else prompt_ids(api.model, body.get("prompt"))
            max_tokens = _max_tokens(body, kind, ids, api.model.max_context)
            rid, events = api.open(ids, max_tokens, bool(body.get("ignore_eos", False)))
        except BadRequest as exc:
            return error(str(exc))
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(_stream(api, kind, ids, rid, events, include_usage),
                                     media_type="text/event-stream")
        try:
            return JSONResponse(await _whole(api, kind, ids, rid, events))
        except RuntimeError as exc:
            return error(str(exc), 500)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await complete(request, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await complete(request, "chat")

    @app.post("/tokenize")
    async def tokenize(request: Request):
        try:
            body = await body_of(request)
            ids = chat_ids(api.model, body["messages"]) if "messages" in body else prompt_ids(api.model, body.get("prompt"))
        except BadRequest as exc:
            return error(str(exc))
        return {"tokens": ids, "count": len(ids), "max_model_len": api.model.max_context}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": api.name, "object": "model", "created": int(api.started),
                                            "owned_by": "ppsd", "max_model_len": api.model.max_context}]}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ppsd/stats")
    async def stats():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {**api.engine.stats(), "http_loop_cpu_s": time.thread_time(),
                "process_cpu_s": usage.ru_utime + usage.ru_stime, "uptime_s": time.time() - api.started,
                "pid": os.getpid(), "http_cores": sorted(os.sched_getaffinity(0))}

    return app


# --- the command ---------------------------------------------------------------------------------------------

def serve_command(args) -> int:
    """`ppsd serve` (see the module doc): checks what it can before loading the model, then serves until SIGINT."""
    from sim.serve.policies import parse_policy
    from sim.serve.scheduler import SchedulerConfig

    policy = parse_policy(args.policy)
    config = SchedulerConfig(max_batch=args.max_batch, max_tokens=args.max_tokens)
    engine_core, http_cores = split_cores(args.engine_core)
    sock = bind_socket(args.host, args.port)
    try:
        engine, model = _load_engine(args, policy, config, min(http_cores) if http_cores else None)
    except BaseException:
        sock.close()
        raise
    return _run(args, sock, engine, model, engine_core, http_cores)


def _load_engine(args, policy, config, stage_core: int | None):
    import torch

    from runtime.llm import load_model
    from runtime.serve.engine import ServeEngine, check_policy, prior_alpha

    profile = cost = None
    if args.profile:
        from ppsd.profile import load_profile

        profile = load_profile(args.profile)
    needs_cost = _needs_cost(policy)
    if needs_cost and profile is None:
        raise UserError(f"policy {policy.spec()!r} prices its iterations from a profile's batch tables",
                        "add --profile DIR (a profile with latency.batch)")
    if needs_cost:
        from sim.batch.costs import batch_costs, check_batch

        check_batch(profile, config.max_batch)
        cost = batch_costs(profile)
    torch.set_num_threads(1)
    model = load_model(args.model, device="cpu", dtype=args.dtype)
    check_policy(policy, model.num_layers, config, cost)
    engine = ServeEngine(model, policy, config, cost=cost, alpha=prior_alpha(profile, policy), heads_dir=args.heads,
                         exit_head=args.exit_head or ("trained" if args.heads else "shared"), stage_core=stage_core)
    return engine, model


def _needs_cost(policy) -> bool:
    from sim.serve.policies import AcceptanceSeen

    try:
        policy.decide(1, 64.0, AcceptanceSeen(0.5), None)
    except UserError:
        return True
    return False


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server that stops the engine first on a signal, so open streams end with an abort
        chunk and `[DONE]` instead of being cancelled."""

        def __init__(self, config, engine):
            super().__init__(config)
            self.engine = engine

        def handle_exit(self, sig, frame) -> None:
            self.engine.stop()
            super().handle_exit(sig, frame)

    return Server


def _run(args, sock, engine, model, engine_core, http_cores) -> int:
    import uvicorn

    if http_cores:
        os.sched_setaffinity(0, http_cores)  # this (the HTTP loop's) thread; the engine's is pinned on its own
    engine.start(engine_core)
    app = build_app(Api(engine, model, args.served_model_name or model.model_id))
    server = _server_class()(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S), engine)
    host, port = sock.getsockname()[:2]
    where = f"engine on core {engine_core}, HTTP on cores {sorted(http_cores)}" if http_cores else "no core pinning"
    print(f"ppsd serve: {model.model_id} with policy {engine.policy.spec()} (max batch {engine.config.max_batch}) "
          f"on http://{host}:{port} ({where}); Ctrl-C stops", file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it shut down on
        pass
    finally:
        engine.close()
        sock.close()
    print("ppsd serve: stopped", file=sys.stderr, flush=True)
    return 0
