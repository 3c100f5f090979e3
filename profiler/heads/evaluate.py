"""Held-out evaluation of exit heads (`ppsd heads eval`).

On the held-out split (same per-category rule as training, the last prompts of each category, so
disjoint from the training prompts) the full model decodes greedily; along that trajectory, per exit
layer and per head:
  α  greedy agreement: the head's argmax equals the full model's token (the match trace m_p)
  β  Σ_v min(p_full(v), p_exit(v)): the acceptance probability of a sampled draft at T = 1
Heads: "shared" (naive: the frozen final norm + LM head at layer E), "trained" (adapter before
them) and "vocab<V>" (trained adapter + the V most frequent tokens' LM-head rows; a full-model token
outside the subset is a rejection). Rows come out in the profile's acceptance long-table format
(ppsd.profile.ACCEPTANCE_COLUMNS), so they drop into a profile folder's acceptance table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ppsd.exit_heads import SHARED, TRAINED, order_key, vocab_name, vocab_size
from ppsd.paths import cache_dir
from profiler.heads.collect import collect, collection_key
from runtime.heads.store import ExitHeads
from profiler.heads.timing import draft_path_evictor, time_ms
from runtime.heads.vocab import VocabHead


@dataclass
class EvalResult:
    acceptance: object                  # pandas DataFrame, ACCEPTANCE_COLUMNS
    summary: object                     # DataFrame: exit_layer, head, category, tokens, alpha, beta
    latency: dict = field(default_factory=dict)   # name -> {kind, params, n_values, median_ms, p10_ms, p90_ms}
    shared_latency: dict = field(default_factory=dict)
    prompts: int = 0
    tokens: int = 0


def heldout_prompts(heads: ExitHeads, source: str | None = None, heldout_per_category: int | None = None,
                    limit_per_category: int | None = None):
    """The held-out split of the prompt set the heads were trained with (or of `source`), minus any
    prompt the heads were trained on."""
    from profiler.heads.splits import default_splits

    data = heads.meta.training.get("data") or {}
    src = source if source is not None else data.get("prompts", "spec-bench")
    per_cat = int(data.get("per_category", 8))
    held = heldout_per_category if heldout_per_category is not None else int(data.get("heldout_per_category", 3))
    sp = default_splits(src, per_cat, held)
    trained_on = set(heads.meta.training.get("train_prompt_ids") or [])
    same_source = src == data.get("prompts")
    prompts = [p for p in sp.heldout if not (same_source and p.prompt_id in trained_on)]
    if limit_per_category:
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            if seen.get(p.category, 0) < limit_per_category:
                seen[p.category] = seen.get(p.category, 0) + 1
                kept.append(p)
        prompts = kept
    return prompts


def _heads_to_score(heads: ExitHeads, vocab_sizes: list[int]) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = [(SHARED, None), (TRAINED, heads)]
    for v in vocab_sizes:
        out.append((vocab_name(v), heads.vocab_head(v)))
    return out


@torch.inference_mode()
def score(heads: ExitHeads, records, exits: list[int], vocab_sizes: list[int], chunk: int = 256, progress=None):
    """Acceptance rows (match, β, the draft's confidence) for every head and exit on collected records."""
    import pandas as pd

    frozen = heads.frozen
    dev = frozen.lm_weight.device  # records live on the CPU (collected to disk); the heads on the model's device
    scorers = _heads_to_score(heads, vocab_sizes)
    n = len(records)
    cols: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {
        (name, e): (np.zeros(n, dtype=np.int8), np.zeros(n, dtype=np.float32), np.zeros(n, dtype=np.float32))
        for name, _ in scorers for e in exits}
    # probabilities in fp32 whatever the heads' dtype (a bf16 model's heads draft in bf16): β sums
    # tens of thousands of small terms, and numpy has no bfloat16
    for i in range(0, n, chunk):
        sl = slice(i, min(i + chunk, n))
        p_full = torch.softmax(frozen.logits(records.final[sl].to(dev)).float(), -1)
        target = records.target[sl].to(dev)
        for e in exits:
            h = records.exits[e][sl].to(dev)
            for name, head in scorers:
                if isinstance(head, VocabHead):
                    p_sub = torch.softmax(head.logits(h, e).float(), -1)
                    draft = head.subset[p_sub.argmax(-1)]
                    beta = torch.minimum(p_full.index_select(-1, head.subset), p_sub).sum(-1)
                    sure = p_sub.max(-1).values
                else:
                    logits = frozen.logits(h) if head is None else head.logits(h, e)
                    p_exit = torch.softmax(logits.float(), -1)
                    draft = p_exit.argmax(-1)
                    beta = torch.minimum(p_full, p_exit).sum(-1)
                    sure = p_exit.max(-1).values
                m, b, c = cols[(name, e)]
                m[sl] = (draft == target).cpu().numpy()
                b[sl] = beta.cpu().numpy()
                c[sl] = sure.cpu().numpy()
        if progress:
            progress(sl.stop, n)
    pid = np.asarray(records.prompt_ids, dtype=object)[records.prompt_index.numpy()]
    cat = np.asarray(records.categories, dtype=object)[records.prompt_index.numpy()]
    pos = records.position.numpy()
    frames = [pd.DataFrame({"head": name, "prompt_id": pid, "category": cat, "exit_layer": e, "position": pos,
                            "match": m, "beta": b, "confidence": c}) for (name, e), (m, b, c) in cols.items()]
    return pd.concat(frames, ignore_index=True)


def summarise(acceptance) -> object:
    """Per (exit, head): α and β overall ("all") and per category."""
    import pandas as pd

    g_all = acceptance.groupby(["exit_layer", "head"]).agg(tokens=("match", "size"), alpha=("match", "mean"),
                                                           beta=("beta", "mean")).reset_index()
    g_all.insert(2, "category", "all")
    g_cat = acceptance.groupby(["exit_layer", "head", "category"]).agg(
        tokens=("match", "size"), alpha=("match", "mean"), beta=("beta", "mean")).reset_index()
    df = pd.concat([g_all, g_cat], ignore_index=True)
    df["_h"] = df["head"].map({h: i for i, h in enumerate(sorted(df["head"].unique(), key=order_key))})
    df["_c"] = (df["category"] != "all").astype(int)
    df = df.sort_values(["exit_layer", "_c", "category", "_h"]).drop(columns=["_h", "_c"]).reset_index(drop=True)
    df["alpha"] = df["alpha"].round(4)
    df["beta"] = df["beta"].round(4)
    return df


def measure_latency(heads: ExitHeads, exit_layer: int, vocab_sizes: list[int], n_values=(1, 2, 4, 8, 16),
                    repeats: int = 30, evict=None) -> tuple[dict, dict]:
    """Drafting cost per head for n new tokens: (exit_heads dict for profile.json, the shared head's
    numbers for comparison). An adapter is not free: it belongs in stage 1's time. `evict`
    (`profiler.heads.timing.draft_path_evictor`) runs untimed before every timed call, so a head is
    priced with the caches a draft leaves it, as the shared head is in the latency grid; entries
    then say `"timing": "after_draft_layers"` (else `"hot_loop"`)."""
    torch.manual_seed(0)
    H = heads.meta.hidden_size
    dev = heads.frozen.lm_weight.device
    dtype = heads.frozen.dtype  # the states a head drafts from come in the dtype it computes in

    timing = "hot_loop" if evict is None else "after_draft_layers"

    def stats(fn_for_n) -> dict:
        per = [time_ms(fn_for_n(n), repeats=repeats, device=dev, before=evict) for n in n_values]
        return {"n_values": list(n_values), "timing": timing,
                **{k: [round(p[k], 4) for p in per] for k in ("median_ms", "p10_ms", "p90_ms")}}

    def make(fn):
        return lambda n: (lambda h=torch.randn(1, n, H, device=dev, dtype=dtype): fn(h))

    with torch.inference_mode():
        shared = stats(make(lambda h: heads.frozen.logits(h).argmax(-1)))
        out = {TRAINED: {"kind": heads.kind, "params": heads.params(),
                         **stats(make(lambda h: heads.logits(h, exit_layer).argmax(-1)))}}
        for v in vocab_sizes:
            vh = heads.vocab_head(v)
            out[vh.name] = {"kind": f"{heads.kind}+vocab", "params": heads.params(), "vocab": v,
                            **stats(make(lambda h, vh=vh: vh.draft(h, exit_layer)))}
    return out, {"kind": "shared", "params": 0, **shared}


def evaluate_heads(adapter, heads: ExitHeads, prompts, exits: list[int] | None = None,
                   vocab_sizes: list[int] | None = None, max_new_tokens: int | None = None,
                   max_prompt_tokens: int | None = None, gen_batch: int = 16, progress=None,
                   latency: bool = True, latency_n_values=(1, 2, 4, 8, 16)) -> EvalResult:
    """Score naive / trained / reduced-vocabulary heads on `prompts` (the held-out split)."""
    from ppsd.progress import SequentialProgress

    progress = progress or SequentialProgress(enabled=False)
    exits = heads.exits if exits is None else exits
    for e in exits:
        heads._adapter(e)                               # a missing exit is a UserError now, not later
    cfg = (heads.meta.training.get("config") or {})
    vocab_sizes = list(vocab_sizes if vocab_sizes is not None else heads.meta.vocab.get("sizes", []))
    max_new_tokens = max_new_tokens or int(cfg.get("max_new_tokens", 64))
    max_prompt_tokens = max_prompt_tokens or cfg.get("max_prompt_tokens")
    key = collection_key(adapter.model_id, prompts, max_new_tokens, exits, extra=[max_prompt_tokens])
    work = cache_dir() / "heads-work" / f"{adapter.model_id.replace('/', '--')}-eval-{key}"
    progress.phase(f"generating on {len(prompts)} held-out prompts", len(prompts) * max_new_tokens)
    records = collect(adapter, prompts, exits, max_new_tokens, work, batch_size=gen_batch,
                      max_prompt_tokens=max_prompt_tokens, progress=progress.update)
    progress.phase(f"scoring {len(exits)} exits x {2 + len(vocab_sizes)} heads", len(records))
    acceptance = score(heads, records, exits, vocab_sizes, progress=progress.update)
    result = EvalResult(acceptance, summarise(acceptance), prompts=len(prompts), tokens=len(records))
    if latency and exits:
        # The cost is the same at every exit (one adapter + the head); measure it at the middle one.
        mid = exits[len(exits) // 2]
        result.latency, result.shared_latency = measure_latency(heads, mid, vocab_sizes, latency_n_values,
                                                                evict=draft_path_evictor(adapter, mid))
    return result


def comparison_table(summary, category: str = "all"):
    """Wide table: one row per exit, α and β per head."""
    df = summary[summary["category"] == category]
    wide = df.pivot(index="exit_layer", columns="head", values=["alpha", "beta"])
    heads = [h for h in sorted(df["head"].unique(), key=order_key)
             if h in (SHARED, TRAINED) or vocab_size(h) is not None]
    cols = [(m, h) for m in ("alpha", "beta") for h in heads]
    wide = wide[cols]
    wide.columns = [f"{m}_{'naive' if h == SHARED else h}" for m, h in cols]
    return wide.reset_index()
