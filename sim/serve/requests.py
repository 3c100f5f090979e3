"""The entities of a served workload: a request as it arrives, and what happened to it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class ServeRequest:
    """One request of a workload: when it arrives (seconds from the workload's start), which prompt it
    sends (its prompt's own acceptance trace prices its drafts) and how many tokens it asks for."""

    request_id: int
    arrival_s: float
    prompt_id: str
    category: str
    prompt_tokens: int  # the prompt's length as the model encodes it (the prefill's size)
    output_tokens: int  # the generation budget; with `ignore_eos` every request generates exactly this many
    text: str = ""  # the prompt's text (what a real client sends; the simulator reads its trace instead)

    def to_json_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json_dict(cls, d: dict) -> "ServeRequest":
        return cls(request_id=int(d["request_id"]), arrival_s=float(d["arrival_s"]), prompt_id=str(d["prompt_id"]),
                   category=str(d.get("category", "")), prompt_tokens=int(d["prompt_tokens"]),
                   output_tokens=int(d["output_tokens"]), text=str(d.get("text", "")))


@dataclass
class RequestTiming:
    """What one request saw (seconds on the workload's clock). `token_times` holds the time each delivery
    reached the client and `token_counts` how many tokens it carried: a speculative iteration delivers
    several tokens at once, which is one inter-token latency (ITL), as `vllm bench serve` counts chunks."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    first_token_s: float | None = None
    finish_s: float | None = None
    token_times: list[float] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)
    drafted: int = 0  # drafts the verifier judged for this request (a round's, up to its first rejection)
    accepted: int = 0  # drafts it accepted
    rounds: int = 0  # decode iterations that committed tokens to it (AR steps, EESD rounds, PPSD ticks)
    error: str = ""  # a failed request (a real run): why; failed requests count in no latency

    @property
    def output_tokens(self) -> int:
        return int(sum(self.token_counts))

    @property
    def ok(self) -> bool:
        return not self.error and self.finish_s is not None and self.first_token_s is not None

    @property
    def ttft_s(self) -> float:
        return float(self.first_token_s - self.arrival_s)

    @property
    def e2el_s(self) -> float:
        return float(self.finish_s - self.arrival_s)

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (None for a one-token answer), as vLLM defines it."""
        n = self.output_tokens
        return None if n <= 1 else float(self.finish_s - self.first_token_s) / (n - 1)

    @property
    def itl_s(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens committed per decode iteration that committed any (accepted drafts plus the verifier's token)."""
        return (self.output_tokens - 1) / self.rounds if self.rounds else None

    def deliver(self, now_s: float, count: int) -> None:
        """`count` tokens reach the client at `now_s`."""
        if count <= 0:
            return
        if self.first_token_s is None:
            self.first_token_s = now_s
        self.token_times.append(now_s)
        self.token_counts.append(int(count))

    def to_json_dict(self) -> dict:
        d = asdict(self)
        d.update(ttft_s=self.ttft_s if self.ok else None, e2el_s=self.e2el_s if self.ok else None,
                 tpot_s=self.tpot_s if self.ok else None, output_tokens=self.output_tokens)
        return d

    @classmethod
    def from_json_dict(cls, d: dict) -> "RequestTiming":
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})
