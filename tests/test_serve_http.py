"""`ppsd serve` and `ppsd bench-serve` over loopback: streamed completions carry AR's greedy tokens, the load
generator replays a small workload against the server (bounded in count and time) and records every
request, bad input is refused in one line with exit 2, and SIGINT stops the server cleanly with no
process left. Never a timing assertion."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from ppsd.cli import main
from ppsd.net import free_port
from runtime.acceptance import Sampler
from runtime.decoding import generate_ar

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Hello world, a prompt", "x y z", "another prompt here, a bit longer than the rest", "q"]


def start_server(*argv: str) -> tuple[subprocess.Popen, str]:
    """`ppsd serve --model tiny-llama ARGV` on a free loopback port, once /health answers."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ppsd", "serve", "--model", "tiny-llama", "--port", str(port),
                             *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ppsd serve exited {proc.returncode}: {proc.stderr.read()}")
        try:
            if httpx2.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx2.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("ppsd serve did not come up in 120 s")


def stop_server(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, err


@pytest.fixture(scope="module")
def server():
    proc, url = start_server("--policy", "eesd:3:2", "--max-batch", "3")
    yield url
    if proc.poll() is None:
        stop_server(proc)


def _ar(tiny, text: str, n: int) -> list[int]:
    return generate_ar(tiny, tiny.tokenizer.encode(text), n, Sampler.make(0, 0)).tokens


def _stream(url: str, body: dict) -> list[dict]:
    chunks = []
    with httpx2.stream("POST", url, json=body, timeout=60) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
                chunks.append("[DONE]" if data == "[DONE]" else json.loads(data))
    return chunks


def test_a_streamed_completion_carries_ar_greedy_tokens(server, tiny):
    body = {"prompt": PROMPTS[0], "max_tokens": 10, "stream": True, "ignore_eos": True, "temperature": 0,
            "stream_options": {"include_usage": True}}
    chunks = _stream(server + "/v1/completions", body)
    assert chunks[-1] == "[DONE]"
    usage = chunks[-2]["usage"]
    assert usage == {"prompt_tokens": len(PROMPTS[0]), "completion_tokens": 10, "total_tokens": len(PROMPTS[0]) + 10}
    tokens = [c for c in chunks[:-2]]
    assert sum(c["ppsd"]["tokens"] for c in tokens) == 10
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    ids = tokens[-1]["ppsd"]["token_ids"]
    assert ids == _ar(tiny, PROMPTS[0], 10)
    whole = httpx2.post(server + "/v1/completions", json={**body, "stream": False}, timeout=60).json()
    assert whole["ppsd"]["token_ids"] == ids and whole["choices"][0]["text"] == tiny.decode(ids)
    assert "".join(c["choices"][0]["text"] for c in tokens) == tiny.decode(ids)


def test_chat_models_tokenize_and_health(server):
    chunks = _stream(server + "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                       "max_tokens": 4, "stream": True, "ignore_eos": True})
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant" and chunks[-1] == "[DONE]"
    assert sum(c["ppsd"]["tokens"] for c in chunks[:-1]) == 4
    assert httpx2.get(server + "/v1/models").json()["data"][0]["id"] == "tiny-llama"
    assert httpx2.post(server + "/tokenize", json={"prompt": "Hello"}).json()["count"] == 5
    stats = httpx2.get(server + "/ppsd/stats").json()
    assert stats["policy"] == "eesd:3:2" and stats["iterations"] > 0


@pytest.mark.parametrize("body,words", [({"prompt": "hi", "temperature": 0.7}, "temperature 0.7 is not served"),
                                        ({"prompt": "hi", "n": 2}, "one choice"),
                                        ({"prompt": "hi", "max_tokens": 0}, "at least 1"),
                                        ({"prompt": 5}, "prompt must be")])
def test_a_request_the_server_does_not_serve_gets_a_one_line_400(server, body, words):
    resp = httpx2.post(server + "/v1/completions", json=body, timeout=30)
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    assert words in message and "\n" not in message


def test_bench_serve_replays_a_workload_against_the_server(server, tiny, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": f"n{i}", "category": "c", "turns": [t]}) + "\n"
                               for i, t in enumerate(PROMPTS)))
    out = tmp_path / "result.json"
    assert main(["bench-serve", "--base-url", server, "--dataset", str(prompts), "--num-prompts", "6",
                 "--request-rate", "8", "--output-len", "7", "--ignore-eos", "--goodput", "ttft:60000", "tpot:60000",
                 "--max-duration", "120", "--save-result", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["summary"]["completed"] == 6 and summary["summary"]["failed"] == 0
    assert summary["summary"]["total_output_tokens"] == 42 and summary["summary"]["request_goodput"] > 0
    assert set(summary["cpu_share"]) >= {"client", "http_loop", "engine"}
    saved = json.loads(out.read_text())
    texts = {f"n{i}": t for i, t in enumerate(PROMPTS)}
    assert len(saved["requests"]) == 6 and len(saved["workload"]["requests"]) == 6
    for r in saved["requests"]:
        assert r["output_tokens"] == 7 and r["ttft_s"] <= r["e2el_s"] and r["error"] == ""
        assert r["token_ids"] == _ar(tiny, texts[r["prompt_id"]], 7)
        assert r["prompt_tokens"] == len(texts[r["prompt_id"]])  # counted by the server's tokenizer


def test_bench_serve_against_a_saved_workload_and_the_chat_endpoint(server, tmp_path, capsys):
    from sim.serve.requests import ServeRequest
    from sim.serve.workload import Workload

    w = Workload([ServeRequest(i, 0.05 * i, f"p{i}", "c", 3, 3 + i, PROMPTS[i]) for i in range(3)], "poisson", 0, 20.0)
    w.save(tmp_path / "w.json")
    assert main(["bench-serve", "--base-url", server, "--endpoint", "/v1/chat/completions", "--workload",
                 str(tmp_path / "w.json"), "--ignore-eos", "--max-duration", "120", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["summary"]
    assert got["completed"] == 3 and got["total_output_tokens"] == 3 + 4 + 5


@pytest.mark.parametrize("argv,words", [
    (["--request-rate", "0"], "request-rate 0"), (["--request-rate", "-1"], "request-rate -1"),
    (["--num-prompts", "0"], "num-prompts"), (["--goodput", "ttft"], "SLO item"),
    (["--trace", "MALFORMED"], "line 2"), (["--workload", "MISSING"], "does not exist")])
def test_bench_serve_bad_input_is_one_line_exit_2(argv, words, tmp_path, capsys):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"arrival_s": 0, "input_tokens": 5, "output_tokens": 3}\n{"arrival_s": 1}\n')
    argv = [str(bad) if a == "MALFORMED" else str(tmp_path / "none.json") if a == "MISSING" else a for a in argv]
    assert main(["bench-serve", "--base-url", f"http://127.0.0.1:{free_port()}", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_bench_serve_with_no_server_there_is_one_line_exit_2(capsys):
    assert main(["bench-serve", "--base-url", f"http://127.0.0.1:{free_port()}", "--num-prompts", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "nothing listens there" in err and len(err.splitlines()) == 1


def test_python_m_bench_serve_is_the_same_command(capsys):
    from bench.serve import main as bench_main

    assert bench_main(["--base-url", f"http://127.0.0.1:{free_port()}", "--request-rate", "0"]) == 2
    assert "request-rate 0" in capsys.readouterr().err


@pytest.mark.parametrize("argv,words", [(["--policy", "bogus"], "is not one of"),
                                        (["--policy", "eesd:9:2"], "outside 1..5"),
                                        (["--policy", "goodput:3"], "add --profile"),
                                        (["--max-batch", "0"], "max-batch 0")])
def test_serve_bad_input_is_one_line_exit_2(argv, words, capsys):
    assert main(["serve", "--model", "tiny-llama", "--port", str(free_port()), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_serve_on_a_port_in_use_is_one_line_exit_2(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["serve", "--model", "tiny-llama", "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"cannot listen on 127.0.0.1:{port}" in err and len(err.splitlines()) == 1


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def test_sigint_stops_the_server_cleanly_mid_request_with_no_process_left():
    proc, url = start_server("--policy", "ppsd:3")
    children = _children(proc.pid)
    assert children  # PPSD's stage 1
    with httpx2.stream("POST", url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1500, "stream": True,
                                                                "ignore_eos": True}, timeout=60) as resp:
        lines = resp.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))  # the request is running
        code, err = stop_server(proc)
    assert code == 0 and "ppsd serve: stopped" in err and "Traceback" not in err
    assert all(not Path(f"/proc/{c}").exists() for c in children)
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(url + "/health", timeout=2)
