"""Train exit heads by self-distillation (`ppsd heads train`).

1. Collect: greedy-decode the training split with the model itself, streaming per token the hidden
   state at every requested exit and the last layer's output (see collect.py). The full model's
   distribution is recomputed from the last layer's output in chunks and only its top-k is kept
   (k = 32 by default): a [tokens x vocab] table never exists.
2. Per exit, fit the linear adapter (store.LinearAdapter) in front of the frozen final norm + LM head:
   a) closed form first: ridge least squares from the normalised exit state to the normalised
      last-layer state, shrunk towards the identity (the naive head). It costs one 577x577 solve
      and already gets most of the gain;
   b) then distillation: minimise KL(p_full || p_exit) at temperature 1 with Adam for `epochs`
      passes. The KL is taken over the teacher's top-k tokens plus one bucket for the rest of the
      vocabulary (exact for the k+1-way coarsening, a lower bound of the full KL), with the
      student's softmax over the full vocabulary.
   `init="identity"` skips (a) and starts from the naive head (slower to converge).
3. Save after every exit (weights + heads.json listing the finished exits), so an interrupted run
   resumes where it stopped: collection resumes by batch of prompts, training by exit.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ppsd.errors import UserError
from profiler.heads.exits import parse_exits  # noqa: F401 - its home before; `ppsd heads` checks it torch-free
from ppsd.paths import cache_dir
from profiler.heads import splits as _splits
from profiler.heads.collect import collect, collection_key, load_records
from runtime.heads.store import (HeadsMeta, LinearAdapter, FrozenHead, check_compatible, params_info, read_meta,
                                  save_adapter, save_vocab, write_meta, exit_file, HEADS_FILE)
from runtime.heads.vocab import frequency_order


@dataclass
class TrainConfig:
    exits: list[int]
    prompts: str | None = _splits.DEFAULT_PROMPTS
    per_category: int = _splits.DEFAULT_TRAIN_PER_CATEGORY
    heldout_per_category: int = _splits.DEFAULT_HELDOUT_PER_CATEGORY
    max_new_tokens: int = 64
    max_prompt_tokens: int = 384
    epochs: int = 2
    init: str = "lstsq"               # or "identity"
    ridge: float = 1.0                # closed-form shrinkage towards the identity, per 1000 tokens
    lr: float = 1e-3
    batch_tokens: int = 256
    topk: int = 32
    gen_batch: int = 16
    vocab_sizes: list[int] = field(default_factory=lambda: [4096, 8192, 16384])
    seed: int = 0

    def data_key(self) -> dict:
        """What the collected data depends on: a head folder trained on other data is not resumed."""
        return {k: getattr(self, k) for k in ("prompts", "per_category", "heldout_per_category", "max_new_tokens",
                                               "max_prompt_tokens")}


@dataclass
class FitResult:
    adapter: LinearAdapter
    loss_naive: float          # distillation loss of the naive head (identity) on the training tokens
    loss_init: float           # after the closed-form step
    loss_final: float
    agree_naive: float         # greedy agreement on the training tokens
    agree_final: float
    seconds: float
    steps: int


# --- the pieces ----------------------------------------------------------------------------------

def rms_normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@torch.no_grad()
def teacher_topk(frozen: FrozenHead, final: torch.Tensor, k: int, chunk: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k log-probabilities of the full model's distribution, chunk by chunk, on the head's
    device (`final` may be CPU records: each chunk is moved there)."""
    dev = frozen.lm_weight.device
    vals, idx = [], []
    for i in range(0, final.shape[0], chunk):
        lp = torch.log_softmax(frozen.logits(final[i:i + chunk].to(dev)), -1)
        v, ix = lp.topk(k, dim=-1)
        vals.append(v)
        idx.append(ix)
    return torch.cat(vals), torch.cat(idx)


def distill_loss(student_logits: torch.Tensor, t_logp: torch.Tensor, t_idx: torch.Tensor) -> torch.Tensor:
    """Mean KL(teacher || student) over the teacher's top-k tokens plus one bucket for the rest."""
    lq_all = torch.log_softmax(student_logits.float(), -1)
    lq = lq_all.gather(-1, t_idx)
    p = t_logp.exp()
    p_rest = (1 - p.sum(-1)).clamp_min(1e-8)
    q_rest = (1 - lq.exp().sum(-1)).clamp_min(1e-8)
    kl = (p * (t_logp - lq)).sum(-1) + p_rest * (p_rest.log() - q_rest.log())
    return kl.mean()


def closed_form(x: torch.Tensor, y: torch.Tensor, ridge: float) -> tuple[torch.Tensor, torch.Tensor]:
    """argmin_{W,b} sum ||W x^ + b - y^||^2 + lam ||W - I||^2 + lam ||b||^2 with x^, y^ RMS-normalised and
    lam = ridge * n / 1000: least squares shrunk towards the naive head."""
    n, H = x.shape
    dev = x.device
    xa = torch.cat([rms_normalise(x), torch.ones(n, 1, device=dev)], dim=1).double()
    yn = rms_normalise(y.to(dev)).double()
    lam = ridge * n / 1000.0
    gram = xa.T @ xa + lam * torch.eye(H + 1, dtype=torch.float64, device=dev)
    prior = torch.zeros(H, H + 1, dtype=torch.float64, device=dev)
    prior[:, :H] = torch.eye(H, dtype=torch.float64, device=dev)
    rhs = yn.T @ xa + lam * prior                               # [H, H+1]
    wa = torch.linalg.solve(gram, rhs.T).T                     # gram is symmetric
    return wa[:, :H].float(), wa[:, H].float()


@torch.no_grad()
def _evaluate(adapter: LinearAdapter, frozen: FrozenHead, x, t_logp, t_idx, target, chunk: int = 512):
    dev = frozen.lm_weight.device  # each chunk goes to the head's device (x / target may be CPU records)
    loss, agree = 0.0, 0
    for i in range(0, x.shape[0], chunk):
        sl = slice(i, i + chunk)
        logits = frozen.logits(adapter(x[sl].to(dev)))
        loss += float(distill_loss(logits, t_logp[sl].to(dev), t_idx[sl].to(dev))) * logits.shape[0]
        agree += int((logits.argmax(-1) == target[sl].to(dev)).sum())
    n = max(x.shape[0], 1)
    return loss / n, agree / n


def fit_exit(x: torch.Tensor, final: torch.Tensor, frozen: FrozenHead, *, t_logp=None, t_idx=None, target=None,
             epochs: int = 1, init: str = "lstsq", ridge: float = 1.0, lr: float = 1e-3, batch_tokens: int = 256,
             topk: int = 32, seed: int = 0, eval_tokens: int = 1024, on_step=None) -> FitResult:
    """Fit one exit's adapter: x [n, H] exit states, final [n, H] last-layer states (teacher).

    The losses and agreements reported are measured on a fixed sample of `eval_tokens` training
    tokens: each full-vocabulary pass over all of them would cost as much as a training epoch.

    Devices: x / final / target may be CPU records while the frozen head sits on the model's GPU;
    they are copied there once (a no-op on CPU) and the closed form, the adapter and every batch run
    on the head's device (the 4097² float64 solve of a 7B model takes seconds on a GPU, minutes on
    one CPU thread). The random index draws stay on the CPU generator, so the CPU result is the
    same as before and a GPU run draws the same batches."""
    t0 = time.perf_counter()
    dev = frozen.lm_weight.device
    x, final = x.to(dev), final.to(dev)
    if t_logp is None or t_idx is None:
        t_logp, t_idx = teacher_topk(frozen, final, topk)
    if target is None:
        target = t_idx[:, 0]
    H = x.shape[1]
    adapter = LinearAdapter(H).to(dev)
    sample = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))[:eval_tokens]

    def rows(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return t[idx.to(t.device)].to(dev)

    probe = (rows(x, sample), rows(t_logp, sample), rows(t_idx, sample), rows(target, sample))
    loss_naive, agree_naive = _evaluate(adapter, frozen, *probe)
    if init == "lstsq":
        w, b = closed_form(x, final, ridge)
        with torch.no_grad():
            adapter.weight.copy_(w)
            adapter.bias.copy_(b)
    elif init != "identity":
        raise UserError(f"unknown --init {init!r}", "use lstsq or identity")
    loss_init, _ = _evaluate(adapter, frozen, *probe)
    n = x.shape[0]
    steps_per_epoch = math.ceil(n / batch_tokens)
    total = epochs * steps_per_epoch
    if total:
        opt = torch.optim.Adam(adapter.parameters(), lr=lr)
        # Warm up then anneal: stable from the closed-form start, settles by the last step.
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total, pct_start=0.1)
        gen = torch.Generator().manual_seed(seed)
        step = 0
        for _ in range(epochs):
            perm = torch.randperm(n, generator=gen)
            for i in range(0, n, batch_tokens):
                b = perm[i:i + batch_tokens]
                loss = distill_loss(frozen.logits(adapter(rows(x, b))), rows(t_logp, b), rows(t_idx, b))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                step += 1
                if on_step:
                    on_step(step, total)
    loss_final, agree_final = _evaluate(adapter, frozen, *probe)
    adapter.requires_grad_(False)
    return FitResult(adapter, loss_naive, loss_init, loss_final, agree_naive, agree_final,
                     time.perf_counter() - t0, total)


# --- the whole command ---------------------------------------------------------------------------

def work_dir_for(adapter, cfg: TrainConfig, prompts) -> Path:
    key = collection_key(adapter.model_id, prompts, cfg.max_new_tokens, cfg.exits,
                         extra=[cfg.max_prompt_tokens])
    return cache_dir() / "heads-work" / f"{adapter.model_id.replace('/', '--')}-{key}"


def _open_meta(out: Path, adapter, cfg: TrainConfig, fresh: bool) -> HeadsMeta:
    """Resume the folder's heads.json when it was made from the same data, else start a new one."""
    if (out / HEADS_FILE).is_file() and not fresh:
        meta = read_meta(out)
        check_compatible(meta, adapter, out)
        if meta.training.get("data") == cfg.data_key():
            meta.exits = [e for e in meta.exits if (out / exit_file(e)).is_file()]
            meta.requested_exits = sorted(set(meta.requested_exits) | set(cfg.exits))
            return meta
        raise UserError(f"{out} holds heads trained on other data ({meta.training.get('data')})",
                        "give another --out folder, or add --fresh to replace them")
    return HeadsMeta(model_id=adapter.model_id, num_layers=adapter.num_layers, hidden_size=adapter.hidden_size,
                     vocab_size=adapter.vocab_size, requested_exits=list(cfg.exits),
                     params=params_info(adapter.hidden_size), training={"data": cfg.data_key(), "per_exit": {}})


def train_heads(adapter, cfg: TrainConfig, out: Path, progress=None, fresh: bool = False) -> HeadsMeta:
    """Collect, fit every requested exit not yet in `out`, save as it goes; return the final meta."""
    from ppsd.progress import SequentialProgress

    progress = progress or SequentialProgress(enabled=False)
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    meta = _open_meta(out, adapter, cfg, fresh)
    todo = [e for e in cfg.exits if e not in meta.exits]
    sp = _splits.default_splits(cfg.prompts, cfg.per_category, cfg.heldout_per_category)
    work = work_dir_for(adapter, cfg, sp.train)
    t_start = time.perf_counter()

    progress.phase(f"generating on {len(sp.train)} training prompts", len(sp.train) * cfg.max_new_tokens)
    t0 = time.perf_counter()
    collect(adapter, sp.train, cfg.exits, cfg.max_new_tokens, work, batch_size=cfg.gen_batch,
            max_prompt_tokens=cfg.max_prompt_tokens, progress=progress.update, load=False)
    collect_s = time.perf_counter() - t0
    base = load_records(work, sp.train, [])
    frozen = FrozenHead(adapter)
    t_logp, t_idx = teacher_topk(frozen, base.final, cfg.topk)
    order = frequency_order(base.target, adapter.vocab_size)
    save_vocab(out, order)
    sizes = [v for v in cfg.vocab_sizes if v < adapter.vocab_size]   # a full-size subset is just the trained head
    meta.vocab = {"file": "vocab.safetensors", "sizes": sizes,
                  "source": "greedy generations on the training split"}
    meta.training.update({
        "data": cfg.data_key(), "config": asdict(cfg), "prompts": sp.source,
        "train_prompts": len(sp.train), "heldout_prompts": len(sp.heldout), "tokens": len(base),
        "train_prompt_ids": [p.prompt_id for p in sp.train], "collect_s": round(collect_s, 1),
        "objective": f"KL(full || exit) at temperature 1 over the teacher's top-{cfg.topk} + rest bucket",
        "init": cfg.init, "torch_threads": torch.get_num_threads()})
    meta.training.setdefault("per_exit", {})
    write_meta(out, meta)

    for i, e in enumerate(todo):
        x = load_records(work, sp.train, [e]).exits[e]
        progress.phase(f"exit {e} ({i + 1}/{len(todo)})", cfg.epochs * math.ceil(len(x) / cfg.batch_tokens))
        fit = fit_exit(x, base.final, frozen, t_logp=t_logp, t_idx=t_idx, target=base.target, epochs=cfg.epochs,
                       init=cfg.init, ridge=cfg.ridge, lr=cfg.lr, batch_tokens=cfg.batch_tokens, seed=cfg.seed + e,
                       on_step=progress.update)
        info = {"loss_naive": round(fit.loss_naive, 5), "loss_init": round(fit.loss_init, 5),
                "loss_final": round(fit.loss_final, 5), "train_agree_naive": round(fit.agree_naive, 4),
                "train_agree_final": round(fit.agree_final, 4), "seconds": round(fit.seconds, 2), "steps": fit.steps}
        save_adapter(out, e, fit.adapter, info)
        meta.exits = sorted(set(meta.exits) | {e})
        meta.training["per_exit"][str(e)] = info
        write_meta(out, meta)
        progress.log(f"exit {e}: train agreement {fit.agree_naive:.3f} -> {fit.agree_final:.3f}, "
                     f"KL {fit.loss_naive:.3f} -> {fit.loss_final:.3f} ({fit.seconds:.1f} s)")
    meta.training["total_s"] = round(meta.training.get("total_s", 0.0) + time.perf_counter() - t_start, 1)
    write_meta(out, meta)
    return meta
