"""Acceptance streams: which drafted positions the verifier accepts, and at what context.

Convention (shared by every engine): position j of a generation is produced by one forward pass;
`match[j]` says whether the exit-E draft of token j (made with a correct prefix) equals the full
model's token j. In EESD, a round starting at j drafts j, j+1, ... and keeps the leading matches;
in PPSD the pass for token j+1 survives iff match[j]. A stream is a concatenation of generations;
`seg_start[j]` marks the first token of each (the pipeline restarts there, from the prefill).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED

DEFAULT_GEN_LEN = 256


@dataclass
class Stream:
    match: np.ndarray  # bool [T]
    context: np.ndarray  # float [T]: tokens already in the KV cache when token j is computed
    seg_start: np.ndarray  # bool [T]
    source: str  # "trace" | "beta" | "bernoulli"
    # float [T]: the confidence of the exit-E draft of token j (its top-1 probability, made with a correct
    # prefix), what a confidence stop reads; None where the acceptance source has none
    confidence: np.ndarray | None = None

    @property
    def tokens(self) -> int:
        return int(len(self.match))

    @property
    def alpha(self) -> float:
        return float(self.match.mean()) if len(self.match) else 0.0


def check_alpha(alpha) -> float:
    if alpha is None:
        raise UserError("Bernoulli acceptance needs an acceptance rate", "give --alpha A with 0 <= A <= 1")
    a = float(alpha)
    if not 0.0 <= a <= 1.0 or a != a:
        raise UserError(f"alpha {alpha} is outside [0, 1]", "give --alpha A with 0 <= A <= 1")
    return a


def check_tokens(tokens) -> int | None:
    if tokens is None:
        return None
    if int(tokens) < 1:
        raise UserError(f"--tokens {tokens} must be at least 1", "give --tokens between 1 and 10000000")
    if int(tokens) > 10_000_000:
        raise UserError(f"--tokens {tokens} is too many", "give --tokens between 1 and 10000000")
    return int(tokens)


def bernoulli_stream(profile, alpha: float, tokens: int, seed: int) -> Stream:
    """A seeded i.i.d. stream. Contexts cycle through generations of the profile's recorded length
    (back-to-back generations), so long streams stay inside the profiled context range."""
    alpha = check_alpha(alpha)
    rng = np.random.default_rng(seed)
    match = rng.random(tokens) < alpha
    acc = profile.meta.get("acceptance") or {}
    gen_len = int(acc.get("max_new_tokens") or DEFAULT_GEN_LEN)
    c0 = float(profile.context_values[0])
    context = c0 + (np.arange(tokens) % gen_len)
    seg = np.zeros(tokens, dtype=bool)
    seg[0] = True
    return Stream(match, context.astype(float), seg, "bernoulli")


# --- recorded traces ---------------------------------------------------------------------------

_TRACES: dict = {}


@dataclass
class _Trace:
    prompt_ids: list[str]
    categories: list[str]
    match: list[np.ndarray]
    beta: list[np.ndarray]
    start_context: list[float]
    confidence: list[np.ndarray] | None = None  # None: the profile recorded no confidences


def _prompt_contexts(profile) -> dict[str, float]:
    out = {}
    for g in profile.generations():
        pt = g.get("prompt_tokens")
        if isinstance(pt, (list, tuple)):
            pt = len(pt)
        if pt is not None:
            out[str(g.get("prompt_id"))] = float(pt)
    return out


def _traces(profile, head: str) -> dict[int, _Trace]:
    """Per exit layer, each prompt's trace in position order (built once per profile and head)."""
    key = (id(profile), head)
    hit = _TRACES.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    df = profile.acceptance
    df = df[df["head"] == head]
    if df.empty:
        heads = sorted(profile.acceptance["head"].unique().tolist())
        raise UserError(f"profile {profile.path} has no acceptance data for exit head {head!r}",
                        f"use one of: {', '.join(heads)}")
    df = df.sort_values(["exit_layer", "prompt_id", "position"], kind="stable")
    ctx = _prompt_contexts(profile)
    c0 = float(profile.context_values[0])
    exits = df["exit_layer"].to_numpy()
    pids = df["prompt_id"].astype(str).to_numpy()
    cats = df["category"].astype(str).to_numpy()
    match = df["match"].to_numpy().astype(bool)
    beta = df["beta"].to_numpy(dtype=float)
    beta = np.where(np.isfinite(beta), beta, match.astype(float))
    conf = df["confidence"].to_numpy(dtype=float) if "confidence" in df.columns else None
    if conf is not None and not np.isfinite(conf).all():
        conf = None  # some rows predate the confidences: a confidence stop cannot be priced from them
    # boundaries where (exit, prompt) changes
    change = np.ones(len(df), dtype=bool)
    change[1:] = (exits[1:] != exits[:-1]) | (pids[1:] != pids[:-1])
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], len(df))
    out: dict[int, _Trace] = {}
    for s, e in zip(starts, ends):
        ex = int(exits[s])
        t = out.setdefault(ex, _Trace([], [], [], [], [], None if conf is None else []))
        t.prompt_ids.append(pids[s])
        t.categories.append(cats[s])
        t.match.append(match[s:e])
        t.beta.append(beta[s:e])
        t.start_context.append(ctx.get(pids[s], c0))
        if conf is not None:
            t.confidence.append(conf[s:e])
    if len(_TRACES) > 16:
        _TRACES.clear()
    _TRACES[key] = (profile, out)
    return out


def _sampled_traces(profile, head: str, temperature: float) -> dict[int, _Trace]:
    """Per exit layer, each prompt's β along its trajectory sampled at `temperature` (a temperature
    the profile holds: `Profile.beta_rows`), in position order; `match` is unused there (zeros)."""
    key = (id(profile), head, float(temperature))
    hit = _TRACES.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    df = profile.beta_rows(temperature, head).sort_values(["exit_layer", "prompt_id", "position"], kind="stable")
    ctx = _prompt_contexts(profile)
    c0 = float(profile.context_values[0])
    # each draft's confidence along the sampled trajectory, where the profile recorded it for every row
    confident = "confidence" in df.columns and bool(df["confidence"].notna().all())
    out: dict[int, _Trace] = {}
    for (ex, pid), g in df.groupby(["exit_layer", "prompt_id"], sort=True):
        t = out.setdefault(int(ex), _Trace([], [], [], [], [], [] if confident else None))
        beta = g["beta"].to_numpy(dtype=float)
        if confident:
            t.confidence.append(g["confidence"].to_numpy(dtype=float))
        t.prompt_ids.append(str(pid))
        t.categories.append(str(g["category"].iloc[0]))
        t.match.append(np.zeros(len(beta), dtype=bool))
        t.beta.append(np.where(np.isfinite(beta), beta, 0.0))
        t.start_context.append(ctx.get(str(pid), c0))
    if len(_TRACES) > 16:
        _TRACES.clear()
    _TRACES[key] = (profile, out)
    return out


def trace_stream(profile, exit_layer: int, *, tokens: int | None = None, category: str | None = None,
                 prompt_ids=None, temperature: float = 0.0, seed: int = 0, head: str = SHARED,
                 alpha_scale: float = 1.0) -> Stream:
    """The recorded traces of one exit layer as a stream (see module doc). temperature > 0 draws
    each position from Bernoulli(β_p), β at exactly that temperature: along the profile's
    trajectories sampled at it (source "beta-sampled"), or for a profile without them the legacy β
    along the greedy trajectory when it was recorded at that temperature (source "beta"); any other
    temperature is a UserError naming the ones the profile holds (no substitution, no
    interpolation). alpha_scale ≠ 1 rescales acceptance (seeded what-if)."""
    sampled = bool(temperature and temperature > 0)
    if sampled:
        temperature = profile.match_temperature(temperature)
        sampled = profile.beta_trajectory == "sampled"
    traces = _sampled_traces(profile, head, temperature) if sampled else _traces(profile, head)
    tr = traces.get(int(exit_layer))
    if tr is None:
        raise UserError(f"profile {profile.path} has no acceptance trace for exit layer {exit_layer}",
                        f"use an exit layer in {sorted(traces)} or --acceptance bernoulli --alpha A")
    idx = list(range(len(tr.prompt_ids)))
    if category is not None:
        cats = sorted(set(tr.categories))
        if category not in cats:
            raise UserError(f"unknown category {category!r}", f"use one of: {', '.join(cats)}")
        idx = [i for i in idx if tr.categories[i] == category]
    if prompt_ids is not None:
        wanted = [str(p) for p in prompt_ids]
        where = {p: i for i, p in enumerate(tr.prompt_ids)}
        missing = [p for p in wanted if p not in where]
        if missing:
            raise UserError(f"unknown prompt id(s) {', '.join(missing[:5])}",
                            f"use ids from the profile, e.g. {', '.join(tr.prompt_ids[:5])}")
        idx = [where[p] for p in wanted if where[p] in idx]
    idx = [i for i in idx if len(tr.match[i])]
    if not idx:
        raise UserError("the selected prompts have no acceptance positions", "select other prompts or a category")
    segs_m, segs_b, segs_c, segs_q = [], [], [], []
    total = 0
    while True:  # tile the selected generations until `tokens` (once each when tokens is None)
        for i in idx:
            segs_m.append(tr.match[i])
            if tr.confidence is not None:
                segs_q.append(tr.confidence[i])
            segs_b.append(tr.beta[i])
            segs_c.append(tr.start_context[i] + np.arange(len(tr.match[i]), dtype=float))
            total += len(tr.match[i])
            if tokens is not None and total >= tokens:
                break
        if tokens is None or total >= tokens:
            break
    lens = [len(s) for s in segs_m]
    match = np.concatenate(segs_m)
    beta = np.concatenate(segs_b)
    context = np.concatenate(segs_c)
    seg = np.zeros(len(match), dtype=bool)
    seg[np.cumsum([0, *lens[:-1]])] = True
    rng = np.random.default_rng([int(seed), int(exit_layer)])
    source = "trace"
    if temperature and temperature > 0:
        match = rng.random(len(beta)) < np.clip(beta * alpha_scale, 0.0, 1.0)
        source = "beta-sampled" if sampled else "beta"
    elif alpha_scale != 1.0:
        if alpha_scale < 0:
            raise UserError(f"alpha scale {alpha_scale} is negative", "give --alpha-scale F with F >= 0")
        a = match.mean() if len(match) else 0.0
        if alpha_scale < 1.0:  # keep each match with probability F
            match = match & (rng.random(len(match)) < alpha_scale)
        elif a < 1.0:  # turn mismatches into matches so the mean becomes min(1, F·α)
            p = min(1.0, (alpha_scale - 1.0) * a / (1.0 - a))
            match = match | (rng.random(len(match)) < p)
        source = "trace-scaled"
    # confidences from the greedy traces or the trajectories sampled at T (the legacy greedy-trajectory β
    # at T > 0 has none that belong to it)
    conf = np.concatenate(segs_q) if tr.confidence is not None and source != "beta" else None
    if tokens is not None:
        match, context, seg = match[:tokens], context[:tokens], seg[:tokens]
        conf = None if conf is None else conf[:tokens]
    return Stream(match.astype(bool), context, seg, source, conf)
