"""Choosing tokens and deciding whether a draft stands.

One rule for every decoder, so AR, EESD and PPSD cannot drift apart:
  * greedy (temperature 0): the token is the argmax; a draft stands iff it equals the verifier's argmax;
  * sampling: the draft d ~ q (exit head) stands with probability min(1, p(d)/q(d)); otherwise the
    token is drawn from the residual max(0, p - q) renormalised (Leviathan et al. 2023), which makes
    the committed token distributed exactly as p (the full model), i.e. as AR's;
  * a forced trace (timing validation) overrides the decision; the committed token is then the draft
    when accepted, the verifier's choice when rejected.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ppsd.errors import UserError


@dataclass
class Sampler:
    """Token choice at one temperature with its own seeded generator (None = greedy)."""

    temperature: float = 0.0
    generator: torch.Generator | None = None

    @classmethod
    def make(cls, temperature: float, seed: int, device: torch.device | str = "cpu") -> Sampler:
        if temperature < 0:
            raise UserError(f"temperature {temperature} is negative", "use --temperature 0 (greedy) or more")
        if temperature == 0:
            return cls(0.0, None)
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            # a generator must live on the GPU its draws are used on: name it, never "the current one"
            device = torch.device("cuda", torch.cuda.current_device())
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seed))
        return cls(float(temperature), gen)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """[V] logits -> [V] probabilities at this temperature (fp32 for stable ratios)."""
        return torch.softmax(logits.float() / self.temperature, dim=-1)

    def choose(self, logits: torch.Tensor) -> tuple[int, torch.Tensor | None]:
        """[V] logits -> (token, its distribution or None when greedy)."""
        if self.greedy:
            return int(torch.argmax(logits)), None
        p = self.probs(logits)
        return int(torch.multinomial(p, 1, generator=self.generator)), p

    def verify(self, draft: int, q: torch.Tensor | None, target_logits: torch.Tensor,
               forced: bool | None = None, *, q_draft: float | None = None,
               q_full: Callable[[], torch.Tensor] | None = None) -> tuple[bool, int]:
        """Does `draft` (drawn from q) stand against the full model's logits? -> (accepted, token).
        The token is the draft when accepted, else the verifier's replacement. Without `q`, the test
        uses `q_draft` (= q(draft), computed where the draft was drawn) and calls `q_full()` for the
        whole of q only when the residual needs it (a rejection): the same decisions and draws."""
        if self.greedy:
            target = int(torch.argmax(target_logits))
            accepted = (draft == target) if forced is None else forced
            return accepted, (draft if accepted else target)
        p = self.probs(target_logits)
        if forced is not None:
            if forced:
                return True, draft
            return False, int(torch.multinomial(p, 1, generator=self.generator))
        q_d = float(q[draft]) if q is not None else float(q_draft)
        ratio = float(p[draft]) / max(q_d, 1e-30)
        u = float(torch.rand((), generator=self.generator, device=p.device))
        if u < min(1.0, ratio):  # accepted with probability min(1, p(d)/q(d))
            return True, draft
        if q is None:
            q = q_full()
        residual = torch.clamp(p - q, min=0.0)
        total = float(residual.sum())
        if total <= 0.0:  # p == q up to rounding: any draw from p is exact
            residual, total = p, 1.0
        return False, int(torch.multinomial(residual / total, 1, generator=self.generator))


# --- forced acceptance (trace replay) ---------------------------------------------------------------

@dataclass(frozen=True)
class ForcedTrace:
    """Acceptance of the draft for generated position p is `pattern[p % len(pattern)]` (cycled when the
    run is longer than the recording)."""

    pattern: tuple[int, ...]
    label: str = "trace"

    def accept(self, position: int) -> bool:
        return bool(self.pattern[position % len(self.pattern)])


ACCEPT_ALL = ForcedTrace((1,), "accept-all")
REJECT_ALL = ForcedTrace((0,), "reject-all")


def _parse_pattern(text: str, where: str) -> tuple[int, ...]:
    text = text.strip()
    try:
        obj = json.loads(text)
    except ValueError:
        obj = [tok for tok in text.replace(",", " ").split()]
    if isinstance(obj, dict):
        obj = obj.get("match") or obj.get("pattern") or obj.get("trace")
    try:
        vals = tuple(int(v) for v in obj)
    except (TypeError, ValueError):
        vals = ()
    if not vals or any(v not in (0, 1) for v in vals):
        raise UserError(f"{where} is not an accept/reject trace",
                        "give a file with 0/1 values (JSON list, or whitespace/comma separated), "
                        "or accept-all / reject-all")
    return vals


def load_forced_trace(spec: str | None) -> ForcedTrace | None:
    """`--force-trace` value -> ForcedTrace (None when not forcing)."""
    if spec is None:
        return None
    if spec == "accept-all":
        return ACCEPT_ALL
    if spec == "reject-all":
        return REJECT_ALL
    path = Path(spec).expanduser()
    if not path.is_file():
        raise UserError(f"--force-trace {spec}: no such file",
                        "give accept-all, reject-all, or a file of 0/1 values")
    return ForcedTrace(_parse_pattern(path.read_text(), str(path)), path.name)
