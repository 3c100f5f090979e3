"""Decoding plans and results: the vocabulary shared by the simulator and the real runtime.

A prediction (`source="simulated"`) and a measurement (`source="measured"`) of the same Plan use
the same Result type, so they can be laid side by side without translation.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields, replace

from ppsd import exit_heads
from ppsd.errors import UserError
from ppsd.exit_heads import SHARED as SHARED_HEAD
from ppsd.modes import LAUNCHES, Mode  # LAUNCHES re-exported: Plan.launch's values
from sim.schemes import SCHEMES, runtime_decodes, scheme_for
from sim.timeline import Event


RUNTIMES = ("ppsd", "hf")  # Plan.runtime: ppsd's own decoders, or transformers' generate (assisted at an exit)
SCHEDULES = ("constant", "heuristic")  # Plan.schedule: transformers' num_assistant_tokens_schedule (hf EESD)


def check_draft_stop(value, flag: str = "--draft-stop-confidence") -> float:
    """τ of a confidence stop as a float in (0, 1); a one-line UserError naming `flag` otherwise."""
    try:
        tau = float(value)
    except (TypeError, ValueError):
        tau = float("nan")
    if not 0.0 < tau < 1.0:
        raise UserError(f"{flag} {value}: a draft-stop confidence is outside (0, 1)",
                        f"give a confidence threshold between 0 and 1, e.g. {flag} 0.4")
    return tau


@dataclass(frozen=True)
class Plan:
    """How to decode: a scheme (`mode`, its name parsed on construction) and its choices, each field's
    meaning beside it. The timing model each mode prices is docs/model.md."""

    mode: Mode  # AR (a full pass a token), EESD (draft γ with the exit head, then verify), PPSD (a pipeline)
    exit_layer: int | None = None  # E: the draft reads the hidden state after E layers (1 <= E < N); None for AR
    draft_len: int = 1  # γ, drafts per EESD round (ignored by AR and PPSD)
    # PPSD cut points 0 = b0 < b1 = E < ... < bk = N (stage i runs [b_i, b_{i+1})); None: balanced by profiled time
    stage_bounds: tuple[int, ...] | None = None
    stages: int = 2  # k, PPSD stages (used when stage_bounds is None)
    placement: tuple[int, ...] | None = None  # each stage's device; None: one device per stage
    hop_ms: float | None = None  # one-way stage-to-stage message time; None: the profile's measured hop
    exit_head: str = SHARED_HEAD  # which exit head drafts ("shared": the final norm + LM head)
    # how PPSD stage processes start: "local" (a shared-memory epoch board lets stage 1 abandon a stale pass
    # between layers) or "torchrun" (stage 1 finishes stale passes, hears of a rejection at its in-flight cap)
    launch: str = "local"
    # 0: greedy; T > 0: sampled, every drawn token paying a draw and the PPSD verifier, where it rejects, the exit
    # head again for the draft's distribution (sim/schemes/ppsd/stage_costs.py)
    temperature: float = 0.0
    runtime: str = "ppsd"  # "ppsd" (ppsd's own decoders) | "hf" (transformers' generate; sim/schemes/hf.py)
    schedule: str = "constant"  # hf EESD: transformers' num_assistant_tokens_schedule, "constant" | "heuristic"
    # τ, a confidence stop: an EESD round stops drafting after its first draft less confident than τ (γ still the
    # cap); PPSD's stage 1 waits for that draft's verdict (local launch); with runtime "hf" transformers'
    # `assistant_confidence_threshold` (None sets it to 0). None: no stop
    draft_stop: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "mode", Mode.parse(self.mode))
        if self.launch not in LAUNCHES:
            raise UserError(f"unknown launch mode {self.launch!r}", f"use one of: {', '.join(LAUNCHES)}")
        if self.runtime not in RUNTIMES:
            raise UserError(f"unknown runtime {self.runtime!r}", f"use one of: {', '.join(RUNTIMES)}")
        if self.schedule not in SCHEDULES:
            raise UserError(f"unknown draft-length schedule {self.schedule!r}", f"use one of: {', '.join(SCHEDULES)}")
        if not runtime_decodes(self.runtime, self.mode):  # transformers' generate has AR and assisted only
            raise UserError("transformers' generate has no pipeline (PPSD) mode", "use --mode ar or eesd with --runtime hf")
        t = float(self.temperature or 0.0)
        if not t >= 0.0:
            raise UserError(f"temperature {self.temperature} is negative", "give a temperature >= 0")
        object.__setattr__(self, "temperature", t)
        if self.draft_stop is not None:
            object.__setattr__(self, "draft_stop", check_draft_stop(self.draft_stop))
            SCHEMES[self.mode].check_draft_stop(self)
        if self.stage_bounds is not None:
            object.__setattr__(self, "stage_bounds", tuple(int(b) for b in self.stage_bounds))
            object.__setattr__(self, "stages", len(self.stage_bounds) - 1)
        if self.placement is not None:
            object.__setattr__(self, "placement", tuple(int(d) for d in self.placement))

    @property
    def sampled(self) -> bool:
        return self.temperature > 0.0

    def at_temperature(self, temperature: float | None) -> Plan:
        """This plan decoded at `temperature` (None or 0: as it is)."""
        if not temperature or float(temperature) == self.temperature:
            return self
        return replace(self, temperature=float(temperature))

    @property
    def scheme(self):
        """The plan's scheme (`sim.schemes.SCHEMES`): everything that differs between modes; another
        runtime's (`Plan.runtime`, `sim.schemes.RUNTIME_SCHEMES`) for its plans."""
        return SCHEMES[self.mode] if self.runtime == "ppsd" else scheme_for(self)

    @property
    def num_stages(self) -> int:
        return self.scheme.num_stages(self)

    def devices(self) -> tuple[int, ...]:
        return self.scheme.devices(self)

    @property
    def size(self) -> int | None:
        """The plan's second number: EESD's draft length γ, PPSD's stage count k, None for AR."""
        return self.scheme.size_of(self)

    def size_as(self, field_name: str) -> int | None:
        """The second number when it is held in `field_name` ("draft_len", "stages"), else None:
        what tables show in that column."""
        return self.size if self.scheme.has_size(field_name) else None

    def label(self) -> str:
        return self.scheme.label(self)

    def spec(self) -> str:
        """The plan as a plan spec, "mode[:E[:γ or k]]" (`from_spec` reads it back; head and bounds aside)."""
        if not self.scheme.speculative:
            return self.mode.value
        size = self.size
        return f"{self.mode.value}:{self.exit_layer}" + ("" if size is None else f":{size}")

    @classmethod
    def from_spec(cls, text: str, **fields) -> Plan:
        """A plan from "mode[:E[:γ or k]]" (γ for EESD, k for PPSD; its scheme's default when left
        out), with `fields` (exit_head, hop_ms ...) as given. ValueError for a malformed spec, a
        UserError for an unknown mode."""
        parts = [x.strip() for x in str(text).split(":")]
        sch = SCHEMES[Mode.parse(parts[0])]
        if not sch.speculative:
            if len(parts) > 1:
                raise ValueError(f"{parts[0]} takes no exit layer")
            return cls(sch.mode, **fields)
        if not 2 <= len(parts) <= (3 if sch.size is not None else 2):
            raise ValueError(f"plan spec {text!r} is not mode:exit[:N]")
        plan = cls(sch.mode, exit_layer=int(parts[1]), **fields)
        return sch.with_size(plan, int(parts[2]) if len(parts) > 2 else None)

    def slug(self) -> str:
        """A file-name stem: "ar", "eesd-e<E>-g<γ>[-<head>]", "ppsd-e<E>-k<k>[-<head>]"."""
        runtime = "" if self.runtime == "ppsd" else f"-{self.runtime}" + (
            f"-{self.schedule}" if self.schedule != "constant" else "")  # "-hf", "-hf-heuristic"
        if not self.scheme.speculative:
            return self.mode.value + runtime
        size = self.scheme.size
        tail = "" if size is None else f"-{size.letter}{self.size}"
        stop = "" if self.draft_stop is None else f"-stop{self.draft_stop:g}"
        return f"{self.mode.value}-e{self.exit_layer}{tail}{stop}{exit_heads.suffix(self.exit_head)}{runtime}"

    def validate(self, num_layers: int, num_devices: int | None = None) -> Plan:
        """Raise UserError naming the valid range for anything out of range; return self."""
        self.scheme.check(self, num_layers, num_devices)
        if self.hop_ms is not None and self.hop_ms < 0:
            raise UserError(f"hop latency {self.hop_ms} ms is negative", "give a hop latency >= 0")
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        d["mode"] = self.mode.value
        d["stages"] = self.num_stages
        for key in ("stage_bounds", "placement"):
            if d[key] is not None:
                d[key] = list(d[key])
        if not self.sampled:
            del d["temperature"]  # greedy plans read as they always have
        if self.runtime == "ppsd":
            del d["runtime"]
        if self.runtime == "ppsd" or not self.mode.speculative:
            del d["schedule"]  # a draft-length schedule belongs to another runtime's drafting plans
        if self.draft_stop is None:
            del d["draft_stop"]  # plans without a confidence stop read as they always have
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in known})


@dataclass
class SimulatedDetails:
    """What the simulator knows about a run besides the shared Result fields."""

    engine: str                      # "event" (SimPy model), "fast" (exact replay) or "closed form"
    acceptance_source: str           # "trace", "beta" (sampled from β), "trace-scaled", "bernoulli", "iid"
    stream_alpha: float | None       # mean acceptance of the stream that was replayed
    ar_tokens_per_s: float | None    # AR on the same profile and contexts (the speedup's baseline)
    rounds: int = 0                  # verification rounds (AR: tokens)
    generations: int = 0             # prompts replayed (each restarts the pipeline)
    seed: int = 0
    label: str = ""                  # Plan.label() when simulated
    head_rank: int | None = None     # set by sim.planner.heads.merge: rank among the plans drafting with its head
    prefill_s: float | None = None   # every generation's prefill (sim/model/prefill.py), not in time_s
    ttft_s: float | None = None      # mean time to first token of a generation
    e2e_s: float | None = None       # prefill + decode: time_s + prefill_s
    speedup_vs_ar_e2e: float | None = None  # end to end against AR (its prefill included) on one thread
    budget: str | None = None        # same-budget comparison: "2 cores", "4 GPUs" (sim/model/budget.py); None without
    budget_tokens_per_s: float | None = None  # the plan with every unit of the budget (AR, EESD: all of them)
    ar_tp_tokens_per_s: float | None = None   # AR on the whole budget (all cores / tensor parallel)
    # the interval of speedup_vs_ar (sim/intervals/): prompt-to-prompt acceptance for
    # `interval_prompts` prompts and the profile's latency spread; the same-budget twins scaled alike
    predicted_speedup_lo: float | None = None
    predicted_speedup_hi: float | None = None
    speedup_vs_ar_tp_lo: float | None = None
    speedup_vs_ar_tp_hi: float | None = None
    interval_level: float | None = None      # 0.9
    interval_prompts: int | None = None      # n: the prompts the interval is for
    interval_method: str | None = None       # "replay" | "closed form" | "latency" | "exact"
    interval_shift: float | None = None      # the between-prompt-set acceptance shift the interval carries (logit sd)
    # the acceptance at which the plan ties AR on one unit / on the whole budget (sim/planner/break_even.py):
    # None where none up to every draft accepted makes it pay, or, with break_even_note, where it has no price
    break_even_alpha: float | None = None
    break_even_alpha_tp: float | None = None
    break_even_note: str | None = None


@dataclass
class MeasuredDetails:
    """What a real run (`ppsd run`, `ppsd validate`) knows besides the shared Result fields."""

    tokens_per_s_p10: float
    tokens_per_s_p90: float
    tokens_per_s_min: float
    tokens_per_s_max: float
    tokens_per_s_reps: list[float]
    repeats: int
    prefill_s: float
    load_s: float
    warmup: int | None = None
    warmup_tokens: int | None = None  # > 0: each warm-up pass was cut to this many tokens a prompt (runtime/warmup.py)
    temperature: float | None = None
    forced_trace: str | None = None  # label of a forced acceptance trace (timing only, not lossless)
    model: str | None = None
    prompts: int | None = None
    max_new_tokens: int | None = None
    ar_tokens_per_s: float | None = None   # AR measured in the same run
    outputs_match_ar: bool | None = None   # greedy speculative output identical to AR's
    speedup_vs_ar_e2e: float | None = None  # (AR prefill + decode) / (this plan's), measured in the same run
    budget: str | None = None              # same-budget comparison: "2 cores"; None when not measured
    budget_tokens_per_s: float | None = None  # the plan run with the whole budget (AR, EESD: all threads)
    ar_tp_tokens_per_s: float | None = None   # AR with the whole budget, measured in the same run
    emulated: bool | None = None  # True: the devices were emulated from a profile (runtime/emulate.py)
    host_cpu_share: float | None = None  # PPSD on this machine: its stage processes' CPU / (wall × cores)


Details = SimulatedDetails | MeasuredDetails


@dataclass
class Result:
    """What a plan did (measured) or would do (simulated)."""

    plan: Plan
    source: str  # "simulated" | "measured"
    tokens: int
    time_s: float
    tokens_per_s: float
    speedup_vs_ar: float | None = None  # against AR on one thread / one device (the timing model's figure)
    mean_accepted: float = 1.0  # tokens committed per verification round (AR: 1)
    accepted_hist: dict[int, int] = field(default_factory=dict)  # accepted drafts a per round -> count
    acceptance_rate: float | None = None  # accepted drafts / verified drafts
    stage_busy: list[float] = field(default_factory=list)  # busy fraction per stage
    device_busy: list[float] = field(default_factory=list)  # busy fraction per device
    timeline: list[Event] = field(default_factory=list)
    details: Details | None = None
    speedup_vs_ar_tp: float | None = None  # same budget: the plan vs AR using every core / GPU it uses

    @property
    def ar_tokens_per_s(self) -> float | None:
        return None if self.details is None else self.details.ar_tokens_per_s

    def to_json_dict(self, timeline: bool = False) -> dict:
        """Flat JSON object (the `--json` output of `ppsd simulate` and `ppsd run`): the plan, the
        shared figures, then the details' fields."""
        p = self.plan
        d = {
            "source": self.source,
            "mode": p.mode.value,
            "exit_layer": p.exit_layer,
            "draft_len": p.size_as("draft_len"),
            "stages": p.num_stages,
            "stage_bounds": list(p.stage_bounds) if p.stage_bounds else None,
            "placement": list(p.devices()),
            "hop_ms": p.hop_ms,
            "exit_head": p.exit_head,
            "tokens": self.tokens,
            "time_s": self.time_s,
            "tokens_per_s": self.tokens_per_s,
            "speedup_vs_ar": self.speedup_vs_ar,
            "speedup_vs_ar_tp": self.speedup_vs_ar_tp,
            "mean_accepted": self.mean_accepted,
            "accepted_hist": {str(k): v for k, v in sorted(self.accepted_hist.items())},
            "acceptance_rate": self.acceptance_rate,
            "stage_busy": self.stage_busy,
            "device_busy": self.device_busy,
            **(asdict(self.details) if self.details is not None else {}),
        }
        if p.runtime != "ppsd":  # another runtime's plan (additive: ppsd's own plans read as before)
            d["runtime"], d["schedule"], d["label"] = p.runtime, p.schedule, p.label()
        if p.draft_stop is not None:  # a confidence stop (additive, as above)
            d["draft_stop"], d["label"] = p.draft_stop, p.label()
        if timeline:
            d["timeline"] = [asdict(e) for e in self.timeline]
        return d

    @classmethod
    def from_json_dict(cls, d: dict) -> Result:
        mode = Mode.parse(d["mode"])
        plan = Plan.from_dict({
            "mode": mode, "exit_layer": d.get("exit_layer"), "draft_len": d.get("draft_len") or 1,
            "stage_bounds": d.get("stage_bounds"), "stages": d.get("stages") or 1,
            # a single-stage plan's placement is its one device (written for the table), not a choice
            "placement": d.get("placement") if (d.get("stages") or 1) > 1 else None,
            "hop_ms": d.get("hop_ms"), "exit_head": d.get("exit_head", SHARED_HEAD),
            "runtime": d.get("runtime", "ppsd"), "schedule": d.get("schedule", "constant"),
            "draft_stop": d.get("draft_stop"),
        })
        source = d.get("source", "simulated")
        kind = MeasuredDetails if source == "measured" else SimulatedDetails
        names = {f.name for f in fields(kind)}
        required = {f.name for f in fields(kind) if f.default is MISSING and f.default_factory is MISSING}
        details = kind(**{k: v for k, v in d.items() if k in names}) if required <= d.keys() else None
        return cls(
            plan=plan, source=source, tokens=d["tokens"], time_s=d["time_s"],
            tokens_per_s=d["tokens_per_s"], speedup_vs_ar=d.get("speedup_vs_ar"),
            speedup_vs_ar_tp=d.get("speedup_vs_ar_tp"), mean_accepted=d.get("mean_accepted", 1.0),
            accepted_hist={int(k): v for k, v in (d.get("accepted_hist") or {}).items()},
            acceptance_rate=d.get("acceptance_rate"), stage_busy=d.get("stage_busy") or [],
            device_busy=d.get("device_busy") or [],
            timeline=[Event(**e) for e in d.get("timeline") or []],
            details=details,
        )
