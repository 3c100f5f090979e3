"""The settings of one `ppsd validate`, typed, built once from the command line and checked before
anything loads: the argparse namespace stops here."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from ppsd.errors import UserError

DEFAULT_DRAWS = 200  # bootstrap draws of each prediction's 90% interval
MIN_DRAWS = 20       # fewer cannot place a 90% interval's ends
DEFAULT_SEEDS = 3    # sampled runs per plan at --temperature T


@dataclass(frozen=True)
class ValidateConfig:
    """`ppsd validate`'s flags (runtime/cli.py documents each one)."""

    profile: str | None = None
    emulate: str | None = None
    predict_from: str | None = None
    measured_traces: str | None = None  # a profile with the measured prompts' own traces (the in-sample twins)
    prompts: str | None = None
    unseen: bool = False
    split: float | None = None
    draws: int = DEFAULT_DRAWS
    seed: int = 0
    plans: str | None = None
    out: str | None = None
    limit: int | None = 8
    repeats: int = 3
    warmup: int = 1
    warmup_tokens: int = 0       # > 0: each warm-up pass cut to a prompt's start and this many tokens (runtime/warmup.py)
    force_trace: bool = False
    ar_once: bool = False
    turns: int = 0               # > 0: AR and each plan take turns every this many prompts (greedy)
    turn_plans: int = 2          # in turns: plans that share one AR turn, on either side of it
    rounds: int = 1
    retime: bool = False
    stage_timeout: float = 60.0
    cores: int | None = None
    heads: str | None = None
    exit_head: str | None = None
    temperature: float = 0.0
    seeds: int | None = None
    json: bool = False
    runtime: str = "ppsd"        # "hf": transformers' generate measures every plan (runtime/hf_assisted.py)
    schedule: str = "constant"   # hf EESD plans: "constant", "heuristic" or "both"
    batch_sizes: str | None = None  # "1,2,4,8": AR and EESD plans decoding that many sequences at once (validation/batch.py)
    force: bool = False          # replace the validation folder --out names

    @classmethod
    def from_args(cls, args) -> ValidateConfig:
        """The config of a parsed command line; a flag the namespace lacks keeps its default and a
        None (argparse's "not given") the default too where the flag has a number."""
        given = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
        for name in ("draws", "rounds", "temperature", "seed"):
            if given.get(name) is None:
                given.pop(name, None)
        return cls(**given)

    @property
    def emulated(self) -> bool:
        return bool(self.emulate)

    @property
    def sampled(self) -> bool:
        return self.temperature > 0

    @property
    def seed_list(self) -> list[int]:
        """The seeds of a sampled validation: 0..S-1."""
        return list(range(int(self.seeds or DEFAULT_SEEDS)))

    @property
    def measured_profile(self) -> str:
        """The profile whose model and prompts are measured."""
        return self.emulate or self.profile or self.predict_from

    def check(self) -> None:
        """Every refusal the flags alone decide (UserError, one line), before any profile loads."""
        self._check_sources()
        self._check_numbers()
        self.check_out()
        if self.measured_traces and not self.prompts:
            raise UserError("--measured-traces holds the traces of the prompts of --prompts FILE",
                            "give --prompts FILE, the file the traces were profiled on")
        if self.measured_traces and self.sampled:
            raise UserError("--measured-traces replays greedy match traces; it does not combine with --temperature",
                            "drop one of them")
        if self.unseen and not self.prompts:
            raise UserError("--unseen picks among the prompts of --prompts FILE", "give --prompts FILE (or spec-bench)")
        if int(self.draws) < MIN_DRAWS:
            raise UserError(f"--draws {self.draws} is too few for a 90% interval",
                            f"give --draws {MIN_DRAWS} or more (default {DEFAULT_DRAWS})")
        if self.rounds < 1:
            raise UserError(f"--rounds {self.rounds} measures nothing", "give --rounds 1 or more (e.g. 3)")
        if int(self.turns) < 0:
            raise UserError(f"--turns {self.turns} is negative", "give --turns 1 (AR and the plan prompt by prompt) or 0")
        if int(self.turn_plans) < 1:
            raise UserError(f"--turn-plans {self.turn_plans} shares AR among no plan",
                            "give --turn-plans 1 (AR beside every plan) or 2 (the default)")
        if int(self.warmup_tokens) < 0:
            raise UserError(f"--warmup-tokens {self.warmup_tokens} is negative",
                            "give --warmup-tokens 0 (whole warm-up passes) or a count of tokens, e.g. 16")
        if self.turns and (self.sampled or self.ar_once):
            raise UserError("--turns pairs greedy plans with AR prompt by prompt; it takes neither --temperature "
                            "nor --ar-once", "drop --turns, or --temperature / --ar-once")
        if self.rounds > 1 and self.sampled:
            raise UserError("--rounds repeats greedy plans; a sampled validation repeats over its seeds",
                            "drop --rounds, or give --seeds S")
        self._check_sampling()
        self._check_runtime()
        if self.plans is not None:
            from validation.plan_spec import parse_plan_spec

            parse_plan_spec(self.plans)  # a malformed item (or none at all) is refused before a model loads
        self._check_prompts()

    def check_batched(self) -> None:
        """`--batch-sizes`: the flags the batched validation takes, refused one by one where they do not
        apply (never silently ignored), before any profile loads."""
        if not self.profile:
            raise UserError("--batch-sizes needs --profile", "give the profile folder the batches are priced from")
        for flag, given in (("--emulate", self.emulated), ("--split", self.split is not None),
                            ("--measured-traces", bool(self.measured_traces)), ("--heads", bool(self.heads)),
                            ("--exit-head", bool(self.exit_head)), ("--temperature", self.sampled),
                            ("--seeds", self.seeds is not None), ("--turns", bool(self.turns)),
                            ("--rounds", self.rounds != 1), ("--retime", self.retime),
                            ("--force-trace", self.force_trace), ("--ar-once", self.ar_once),
                            ("--runtime hf", self.runtime != "ppsd"), ("--schedule", self.schedule != "constant"),
                            ("--cores", self.cores is not None), ("--warmup-tokens", bool(self.warmup_tokens))):
            if given:
                raise UserError(f"{flag} does not apply with --batch-sizes (greedy shared-head plans on one core, "
                                "AR measured in turns at each batch size)", f"drop {flag.split()[0]}")
        if int(self.draws) < 2:
            raise UserError(f"--draws {self.draws} is too few for an interval", "give --draws 20 or more (default 200)")
        self._check_numbers()
        self.check_out()
        self._check_prompts()

    def _check_prompts(self) -> None:
        if self.prompts is not None:
            from ppsd.prompts import load_prompts

            load_prompts(None if self.prompts == "builtin" else self.prompts)  # a missing file fails now

    @property
    def out_marker(self) -> str:
        """The file that makes a folder this command's output (what --force may replace)."""
        from ppsd import validation_folder as vf

        return vf.BATCH_JSON_FILE if self.batch_sizes is not None else vf.JSON_FILE

    def check_out(self) -> None:
        """--out: a new folder, or with --force an earlier validation folder of the same kind; never a file,
        a folder of anything else, or a place this process cannot write."""
        if self.out is None:
            return
        from ppsd.paths import check_output_folder

        what = "batch validation folder" if self.batch_sizes is not None else "validation folder"
        check_output_folder(self.out, "--out", force=self.force, marker=self.out_marker, what=what)

    def _check_numbers(self) -> None:
        import math

        for flag, value, least in (("--limit", self.limit, 0), ("--repeats", self.repeats, 1),
                                   ("--warmup", self.warmup, 0), ("--cores", self.cores, 1)):
            if value is not None and int(value) < least:
                raise UserError(f"{flag} {value} must be at least {least}",
                                f"give {flag} {least} or more" + (" (0 = all)" if flag == "--limit" else ""))
        if not (math.isfinite(float(self.stage_timeout)) and float(self.stage_timeout) > 0):
            raise UserError(f"--stage-timeout {self.stage_timeout} must be a positive number of seconds",
                            "give e.g. 60")

    def _check_runtime(self) -> None:
        if self.runtime == "ppsd":
            if self.schedule != "constant":
                raise UserError("--schedule is transformers' draft-length schedule", "add --runtime hf, or drop --schedule")
            return
        for flag, given in (("--emulate", self.emulated), ("--temperature", self.sampled),
                            ("--force-trace", self.force_trace), ("--cores", (self.cores or 1) > 1),
                            ("--retime", self.retime), ("--heads", bool(self.heads))):
            if given:
                raise UserError(f"--runtime hf does not take {flag} (transformers' greedy generate, shared head, "
                                "one process)", f"drop {flag}")

    def _check_sources(self) -> None:
        if not self.profile and not self.emulate and not self.predict_from:
            raise UserError("ppsd validate needs a profile", "give --profile DIR (or --emulate PROFILE)")
        if self.emulate and self.profile and Path(self.profile).resolve() != Path(self.emulate).resolve():
            raise UserError("--profile and --emulate name different profiles",
                            "give --emulate PROFILE alone, and --predict-from DIR to predict from another profile")
        if self.prompts and self.emulate:
            raise UserError("--prompts does not apply with --emulate (emulated prompts are the profile's lengths)",
                            "drop --prompts, or --split F to measure part of the emulated profile's prompts")
        if self.split is not None:
            if not 0.0 < float(self.split) < 1.0:
                raise UserError(f"--split {self.split} is not a fraction between 0 and 1",
                                "give e.g. --split 0.5: half of each category's prompts predict, the rest are measured")
            if self.predict_from or self.prompts:
                raise UserError("--split divides one profile's prompts; --predict-from / --prompts bring another set",
                                "give --split F alone, or --predict-from DIR / --prompts FILE without it")

    def _check_sampling(self) -> None:
        """--temperature and --seeds (whether the profile holds β at T is checked once it loads)."""
        t = float(self.temperature)
        if t < 0 or t != t:
            raise UserError(f"--temperature {t} is negative", "give --temperature 0 (greedy) or more")
        if t == 0:
            if self.seeds not in (None, 1):
                raise UserError("--seeds applies to sampled validation only", "add --temperature T, or drop --seeds")
            return
        if self.emulated:
            raise UserError("--temperature does not apply with --emulate (emulated drafts have no distribution)",
                            "validate sampled decoding on the real model: --profile DIR --temperature T")
        if self.force_trace:
            raise UserError("--force-trace replays greedy match traces; it does not combine with --temperature",
                            "drop one of them")
        if self.seeds is not None and int(self.seeds) < 1:
            raise UserError(f"--seeds {self.seeds} must be at least 1", "give --seeds 3")
