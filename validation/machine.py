"""Checks of the machine taken while a validation measures: the co-run check (two processes' layers
at once, before the first plan and after the last) and `--retime` (the pieces of a decode step timed
again before AR and before every plan, so each is priced on the machine it ran on)."""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field

from ppsd.errors import UserError


@dataclass
class CorunCheck:
    """The profiler's 2-process co-run measurement, repeated during a validation whose plans co-run
    stage processes (PPSD), to compare with the profile's figure (`corun_drift` in validation.json)."""

    profile_slowdown: float
    model_spec: str
    adapter: object
    threads: int
    context: int
    seconds: float
    runs: list[float] = field(default_factory=list)

    @classmethod
    def for_run(cls, profile, model, plans) -> CorunCheck | None:
        """A check for these plans, or None: no plan co-runs processes, the device is not a CPU (a
        GPU stage has its own device), or the profile has no 2-process co-run figure to compare with."""
        table = profile.corun_table()
        if table is None or model.device.type != "cpu" or not any(p.scheme.pipelined for p in plans):
            return None
        return cls(profile_slowdown=table["slowdown"], model_spec=profile.model_id,
                   adapter=model, threads=table["threads_per_process"], context=table["context"],
                   seconds=table["seconds_per_round"])

    def measure(self, when: str) -> None:
        from profiler.latency import measure_corun_now

        print(f"co-run check ({when}): two processes' layers at once against one alone ...", flush=True,
              file=sys.stderr)
        try:
            got = measure_corun_now(self.model_spec, self.adapter, self.threads, self.context, self.seconds)
        except RuntimeError as exc:  # a diagnostic: the validation's own figures stand without it
            print(f"warning: co-run check {when} failed ({str(exc).splitlines()[0]}); validation.json will "
                  "carry the checks that ran", file=sys.stderr)
            return
        self.runs.append(float(got["slowdown"][1]))

    def summary_args(self) -> dict | None:
        return {"profile_slowdown": self.profile_slowdown, "runs": list(self.runs)} if self.runs else None


@dataclass
class Retimer:
    """`ppsd validate --retime`: the pieces of a decode step timed again right before AR and before
    every plan (`profiler.piece_times.time_pieces`), so each is priced on the machine it ran on; before
    a pipelined plan, with `corun`, the 2-process co-run slowdown is measured again too."""

    profile: object
    adapter: object
    heads: object = None
    taken: list = field(default_factory=list)  # (what ran next, PieceTimes, co-run factor), in time order
    corun: CorunCheck | None = None

    @classmethod
    def for_run(cls, retime: bool, profile, model, heads_dir: str | None, emulated: bool,
                corun: CorunCheck | None = None) -> Retimer | None:
        if not retime:
            return None
        if emulated or profile.kind != "measured":
            raise UserError("--retime times this machine's pieces against a measured profile",
                            "drop --retime with --emulate or an estimated profile")
        heads = None
        if heads_dir and profile.latency.get("exit_heads"):
            from profiler.heads.profiling import load_for_profile

            heads = load_for_profile(heads_dir, model)
        return cls(profile, model, heads, corun=corun)

    def now(self, what: str, pipelined: bool = False):
        """The PieceScale of the pieces timed now (before `what` runs). Before a pipelined plan the
        co-run check runs too, as a diagnostic only (`corun_drift`): its two processes running layers
        flat out read a different slowdown from the one a pipeline's stages see (its readings and a
        PPSD plan's own moved apart by up to 10% within minutes), so a plan's co-run slowdown stays
        the profile's runtime probe's, with its spread in the plan's interval."""
        from profiler.piece_times import time_pieces

        got = time_pieces(self.profile, self.adapter, self.heads, repeats=RETIME_REPEATS)
        if pipelined and self.corun is not None:
            self.corun.measure(f"before {what}")
        self.taken.append((what, got))
        s = got.summary()["pieces"]
        print(f"  pieces now: layers {s['layers']['drift_pct']:+.1f}%, LM head {s['head']['drift_pct']:+.1f}% "
              "against the profile", file=sys.stderr)
        return got.scale

    def summary(self, ar_scale) -> dict:
        """validation.json's `retime`: how, every timing's drift, and the AR run's."""
        return {"method": f"before AR and before every plan run: the pieces of one decode step timed "
                          f"{RETIME_REPEATS} times (profiler/piece_times.py), each scaled by now / profiled; "
                          "a pipelined plan's co-run slowdown stays the profile's; acceptance from the predicting "
                          "profile alone",
                "repeats": RETIME_REPEATS,
                "ar_drift_pct": ar_scale.drift_pct() if ar_scale is not None else None,
                "timings": [{"before": what, "drift_pct": got.scale.drift_pct()} for what, got in self.taken]}


RETIME_REPEATS = 30  # steps timed per retiming (~2 s for SmolLM2-135M on a CPU)

