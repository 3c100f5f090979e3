"""Trained exit heads in a profile (`ppsd profile --heads DIR`).

The profile's own greedy generations are the trajectory: one teacher-forced pass per prompt gives
the hidden state after every exit the head folder has, and each head drafts from it:
  trained    adapter -> frozen final norm -> LM head
  vocab<V>   the same adapter, LM head restricted to the V most frequent tokens (for every size the
             folder records); a full-model token outside the subset is a rejection
Rows follow the profile's acceptance long table (match against the generated token, β at the
profile's temperature, exactly as the shared head's rows), so the simulator replays them with
`--exit-head NAME`. The drafting cost of each head goes to `latency.exit_heads` (same n grid as
the profile): an adapter is not free, it belongs in stage 1's time.

Torch is imported inside the functions: `profile show` reads the summary without it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ppsd.exit_heads import SHARED, TRAINED, vocab_name


def fingerprint(folder: str | Path) -> str:
    """A short hash of heads.json: a resumed profile must not reuse rows of other heads."""
    from runtime.heads.store import HEADS_FILE

    return hashlib.sha256((Path(folder).expanduser() / HEADS_FILE).read_bytes()).hexdigest()[:16]


def load_for_profile(folder: str | Path, adapter):
    """Every exit the folder has (UserError for another model / layer count / a missing weight file),
    computing in the model's dtype, as `ppsd run` drafts with them (runtime/heads/): their latency
    and traces are then those of the runtime's drafts, at the shared head's precision."""
    from runtime.heads.store import load_heads

    return load_heads(folder, adapter, dtype=adapter.dtype)


def _scorers(heads, vocab_sizes):
    return [(TRAINED, heads)] + [(vocab_name(v), heads.vocab_head(v)) for v in vocab_sizes]


def vocab_sizes_of(heads) -> list[int]:
    if heads.vocab_order is None:
        return []
    return sorted(int(v) for v in heads.meta.vocab.get("sizes", []) if 0 < int(v) <= heads.meta.vocab_size)


def head_rows(adapter, heads, results, temperature: float, progress=None):
    """Acceptance rows (profile long format) for the trained and reduced-vocabulary heads on the
    profile's generations (`results`: profiler.acceptance.PromptResult)."""
    import numpy as np
    import pandas as pd
    import torch

    from ppsd.profile.files import ACCEPTANCE_COLUMNS, ACCEPTANCE_OPTIONAL
    from profiler.acceptance import layer_states
    from runtime.decoding import draft_confidence
    from runtime.heads.vocab import VocabHead

    exits = [e for e in heads.exits if 1 <= e < adapter.num_layers]
    scorers = _scorers(heads, vocab_sizes_of(heads))
    frames = []
    with torch.inference_mode():
        for r in results:
            G = len(r.token_ids)
            if G == 0:
                continue
            states = layer_states(adapter, r.prompt_tokens, r.token_ids)        # [N, G, H]
            target = torch.tensor(r.token_ids, device=states.device)
            full = adapter.head(states[-1]).float()
            full_top = full.argmax(-1)
            p_full = torch.softmax(full / temperature, -1) if temperature > 0 else None
            for e in exits:
                h = states[e - 1]
                for name, head in scorers:
                    logits = head.logits(h, e).float()
                    if isinstance(head, VocabHead):
                        top = head.subset[logits.argmax(-1)]
                        ref = None if p_full is None else p_full.index_select(-1, head.subset)
                    else:
                        top = logits.argmax(-1)
                        ref = p_full
                    if ref is None:  # T = 0: both distributions are one-hot on their argmax
                        beta = (top == full_top).float()
                    else:
                        beta = torch.minimum(torch.softmax(logits / temperature, -1), ref).sum(-1).clamp(max=1.0)
                    frames.append(pd.DataFrame({
                        "head": name, "prompt_id": r.prompt_id, "category": r.category, "exit_layer": e,
                        "position": np.arange(G), "match": (top == target).cpu().numpy().astype(int),
                        "beta": beta.cpu().numpy(), "confidence": draft_confidence(logits).cpu().numpy()}))
            if progress:
                progress()
    if not frames:
        return pd.DataFrame(columns=ACCEPTANCE_COLUMNS + ACCEPTANCE_OPTIONAL)
    return pd.concat(frames, ignore_index=True)[ACCEPTANCE_COLUMNS + ACCEPTANCE_OPTIONAL]


def head_latency(heads, n_values, repeats: int = 10, adapter=None) -> dict:
    """`latency.exit_heads` entries {name: {kind, params, timing, n_values, median_ms, p10_ms, p90_ms}};
    given the model's `adapter`, each timed call follows a read of the draft's layers (the caches as a
    decode leaves them: `profiler.heads.timing.draft_path_evictor`)."""
    from profiler.heads.evaluate import measure_latency
    from profiler.heads.timing import draft_path_evictor

    mid = heads.exits[len(heads.exits) // 2]
    evict = None if adapter is None else draft_path_evictor(adapter, mid)
    return measure_latency(heads, mid, vocab_sizes_of(heads), tuple(int(n) for n in n_values),
                           repeats=max(int(repeats), 5), evict=evict)[0]


def head_info(heads) -> dict:
    """Additive profile.json field `exit_heads`: what the heads are and where they came from."""
    training = heads.meta.training or {}
    return {"path": str(heads.path), "model_id": heads.meta.model_id, "kind": heads.kind, "exits": heads.exits,
            "params_per_exit": heads.params(), "bytes_per_exit": heads.meta.params.get("bytes_per_exit"),
            "vocab_sizes": vocab_sizes_of(heads), "names": [n for n, _ in _scorers(heads, vocab_sizes_of(heads))],
            "training": {k: training.get(k) for k in ("prompts", "train_prompts", "tokens", "objective")
                         if k in training}}


def training_overlap(heads, results) -> list[str]:
    """Profile prompts the heads were trained on (their α there is optimistic)."""
    trained_on = set((heads.meta.training or {}).get("train_prompt_ids") or [])
    return [r.prompt_id for r in results or [] if r.prompt_id in trained_on]


def profile_heads(adapter, heads, results, temperature: float, n_values, repeats: int = 10, progress=None):
    """What `ppsd profile --heads` adds: (acceptance rows or None, latency.exit_heads, exit_heads info).
    info["trained_on_profile_prompts"] counts the profile's prompts in the heads' training split
    (same ids: the prompt source should match too; a caller may warn)."""
    rows = None if results is None else head_rows(adapter, heads, results, temperature, progress)
    info = head_info(heads)
    info["trained_on_profile_prompts"] = len(training_overlap(heads, results))
    return rows, head_latency(heads, n_values, repeats, adapter=adapter), info


def summary_lines(profile) -> list[str]:
    """Per head: draft cost (n = 1) and α at each exit the head has (torch-free, for `profile show`)."""
    extra = profile.latency.get("exit_heads") or {}
    if not extra:
        return []
    lines = [f"exit heads: shared (final norm + LM head) {profile.head_ms(1):.3f} ms a draft"]
    alphas = {}
    if profile.has_acceptance:
        df = profile.acceptance
        for h, g in df.groupby("head"):
            alphas[h] = g.groupby("exit_layer")["match"].mean().to_dict()
    exits = sorted(set().union(*[set(alphas.get(n, {})) for n in extra]) if alphas else [])
    for name, entry in extra.items():
        params = entry.get("params")
        lines.append(f"  {name:>10}: {profile.exit_head_ms(name, 1):.3f} ms a draft ({entry.get('kind')}, "
                     f"{params if params is not None else '?'} extra parameters per exit)")
    if exits:
        names = [SHARED, *extra]
        lines.append("  α by exit:  " + "  ".join(f"{n:>9}" for n in names))
        for e in exits:
            vals = [alphas.get(n, {}).get(e) for n in names]
            lines.append(f"  E={e:<9} " + "  ".join("        -" if v is None else f"{v:9.3f}" for v in vals))
    return lines
