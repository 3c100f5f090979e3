"""Serving metrics as `vllm bench serve` names them: TTFT, TPOT, ITL and E2EL (mean, median, p90, p99 in ms),
request and token throughput, and goodput: completed requests a second that meet every SLO given (vLLM's
`--goodput ttft:MS tpot:MS e2el:MS`). Shared by the simulator and the load generator, so a prediction and
a measurement are summarised by the same code."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import numpy as np

from ppsd.errors import UserError
from sim.serve.requests import RequestTiming

PERCENTILES = (50, 90, 99)
SLO_KEYS = ("ttft", "tpot", "e2el")


@dataclass(frozen=True)
class Slo:
    """Latency objectives in ms (None: not set)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    @classmethod
    def parse(cls, text: str | None) -> "Slo | None":
        """'ttft:500,tpot:50' (commas or spaces between items) -> Slo; None or '' -> None."""
        if text is None:
            return None
        items = [x for x in re.split(r"[,\s]+", str(text).strip()) if x]
        if not items:
            raise UserError("--goodput is empty", "give e.g. --goodput ttft:500,tpot:50")
        got = {}
        for item in items:
            key, _, value = item.partition(":")
            try:
                ms = float(value)
            except ValueError:
                ms = float("nan")
            if key.lower() not in SLO_KEYS or not (ms > 0 and math.isfinite(ms)):
                raise UserError(f"SLO item {item!r} is not KEY:MS with KEY one of {', '.join(SLO_KEYS)} and MS > 0",
                                "give e.g. --goodput ttft:500,tpot:50")
            got[f"{key.lower()}_ms"] = ms
        return cls(**got)

    def met(self, r: RequestTiming) -> bool:
        if not r.ok:
            return False
        tpot = r.tpot_s
        return ((self.ttft_ms is None or 1000 * r.ttft_s <= self.ttft_ms)
                and (self.tpot_ms is None or tpot is None or 1000 * tpot <= self.tpot_ms)
                and (self.e2el_ms is None or 1000 * r.e2el_s <= self.e2el_ms))

    def spec(self) -> str:
        return ",".join(f"{k}:{getattr(self, k + '_ms'):g}" for k in SLO_KEYS if getattr(self, k + "_ms") is not None)


@dataclass(frozen=True)
class LatencyStats:
    """One latency's mean, median, p90 and p99 (ms)."""

    mean: float
    median: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values_s: list[float]) -> "LatencyStats":
        if not values_s:
            return cls(math.nan, math.nan, math.nan, math.nan)
        ms = 1000.0 * np.asarray(values_s, dtype=float)
        p50, p90, p99 = np.percentile(ms, PERCENTILES)
        return cls(float(ms.mean()), float(p50), float(p90), float(p99))


@dataclass(frozen=True)
class ServeMetrics:
    """A run's summary. Throughputs over `duration_s`, the first arrival to the last completion."""

    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    ttft_ms: LatencyStats
    tpot_ms: LatencyStats
    itl_ms: LatencyStats
    e2el_ms: LatencyStats
    request_goodput: float | None = None
    slo: str | None = None
    acceptance_rate: float | None = None  # drafts accepted over drafts judged, all requests
    mean_accepted_length: float | None = None  # tokens a request commits per decode iteration, mean

    def to_json_dict(self) -> dict:
        """vLLM's flat names: mean_ttft_ms, median_ttft_ms, p90_ttft_ms, p99_ttft_ms, ..."""
        d = {k: v for k, v in asdict(self).items() if not isinstance(v, dict)}
        for name in ("ttft", "tpot", "itl", "e2el"):
            stats = getattr(self, f"{name}_ms")
            for field_name, value in asdict(stats).items():
                d[f"{field_name}_{name}_ms"] = value
        return d


def summarize(records: list[RequestTiming], slo: Slo | None = None) -> ServeMetrics:
    """The metrics of a run's requests (failed requests count in `failed` only)."""
    ok = [r for r in records if r.ok]
    if ok:
        start = min(r.arrival_s for r in records)
        duration = max(r.finish_s for r in ok) - start
    else:
        duration = 0.0
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    per_s = (lambda n: n / duration) if duration > 0 else (lambda n: math.nan)
    drafted = sum(r.drafted for r in ok)
    lengths = [r.mean_accepted_length for r in ok if r.mean_accepted_length is not None]
    return ServeMetrics(
        completed=len(ok), failed=len(records) - len(ok), duration_s=duration,
        total_input_tokens=in_tokens, total_output_tokens=out_tokens,
        request_throughput=per_s(len(ok)), output_throughput=per_s(out_tokens),
        total_token_throughput=per_s(out_tokens + in_tokens),
        ttft_ms=LatencyStats.of([r.ttft_s for r in ok]),
        tpot_ms=LatencyStats.of([t for t in (r.tpot_s for r in ok) if t is not None]),
        itl_ms=LatencyStats.of([x for r in ok for x in r.itl_s]),
        e2el_ms=LatencyStats.of([r.e2el_s for r in ok]),
        request_goodput=per_s(sum(slo.met(r) for r in ok)) if slo else None,
        slo=slo.spec() if slo else None,
        acceptance_rate=sum(r.accepted for r in ok) / drafted if drafted else None,
        mean_accepted_length=float(np.mean(lengths)) if lengths else None,
    )
