"""Exit heads on disk and in memory.

A head folder holds
  heads.json               what the heads are for and how they were made (see `HeadsMeta`)
  exit<E>.safetensors      one adapter per exit layer E ("weight" [H, H], "bias" [H])
  vocab.safetensors        optional: "order", every token id by descending frequency in the model's
                           own generations on the training split (a reduced-vocabulary head of
                           size V uses the first V)

The folder lives under `--out` or `cache_dir()/heads/<model>`; weights are never committed (the
repository's .gitignore excludes *.safetensors).

An exit head maps the hidden state after layer E to logits:  adapter -> frozen final norm ->
frozen LM head. The "linear" adapter is  W @ (h / rms(h)) + b  with W = I, b = 0 at the start,
which is exactly the naive (shared) exit head. Normalising the input first costs nothing (the
final norm is scale-invariant anyway) and keeps the fit well conditioned although the hidden
state's scale grows from layer to layer.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from ppsd.errors import UserError
from ppsd.paths import atomic_write_json, cache_dir

HEADS_FILE = "heads.json"
VOCAB_FILE = "vocab.safetensors"
FORMAT = "ppsd-exit-heads"
FORMAT_VERSION = 1
KIND_LINEAR = "linear"


def exit_file(exit_layer: int) -> str:
    return f"exit{exit_layer}.safetensors"


def default_heads_dir(model_id: str) -> Path:
    safe = model_id.replace("/", "--")
    return cache_dir() / "heads" / safe


@dataclass
class HeadsMeta:
    """heads.json. `exits` lists the exits whose weights are complete (resumable training adds to it)."""

    model_id: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    kind: str = KIND_LINEAR
    exits: list[int] = field(default_factory=list)
    requested_exits: list[int] = field(default_factory=list)
    params: dict = field(default_factory=dict)        # per_exit, total, bytes_per_exit
    training: dict = field(default_factory=dict)      # data, hyper-parameters, per-exit losses and seconds
    vocab: dict = field(default_factory=dict)         # {file, sizes}
    created: str = ""
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict, where: Path) -> HeadsMeta:
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise UserError(f"{where} is not a ppsd exit-head file", "give a folder written by `ppsd heads train`")
        if obj.get("format_version") != FORMAT_VERSION:
            raise UserError(f"{where} has format_version {obj.get('format_version')!r}, this ppsd reads "
                            f"{FORMAT_VERSION}", "re-train the heads with this ppsd's `ppsd heads train`")
        try:
            names = cls.__dataclass_fields__
            meta = cls(**{k: v for k, v in obj.items() if k in names})
            meta.num_layers, meta.hidden_size, meta.vocab_size = (int(meta.num_layers), int(meta.hidden_size),
                                                                  int(meta.vocab_size))
            meta.exits = sorted(int(e) for e in meta.exits)
        except (TypeError, ValueError) as exc:
            raise UserError(f"{where} is malformed ({exc})", "re-train the heads with `ppsd heads train`") from None
        return meta


def params_info(hidden_size: int) -> dict:
    per_exit = hidden_size * hidden_size + hidden_size
    return {"per_exit": per_exit, "bytes_per_exit": per_exit * 4}


class LinearAdapter(torch.nn.Module):
    """W @ (h / rms(h)) + b, initialised to the identity (= the naive exit head)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.eye(hidden_size))
        self.bias = torch.nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h.float()  # the normalisation in fp32 whatever the weights' dtype, as the model's RMSNorm does
        x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return F.linear(x.to(self.weight.dtype), self.weight, self.bias)


class FrozenHead:
    """The model's final norm + LM head as plain functions of their detached weights, so gradients
    flow to the adapter only and nothing in the model is touched.

    `dtype`: fp32 (the default) for training and scoring; the model's dtype for drafting and its
    timing (`load_heads(..., dtype=model.dtype)`), so a trained head is compared with the shared
    head at the same precision (and no fp32 copy of a bf16 LM head is made: `.to` keeps the tensor)."""

    def __init__(self, adapter, dtype: torch.dtype = torch.float32):
        norm = adapter.norm
        self.norm_weight = norm.weight.detach().to(dtype)
        self.eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
        self.lm_weight = adapter.lm_head.weight.detach().to(dtype)
        b = getattr(adapter.lm_head, "bias", None)
        self.lm_bias = None if b is None else b.detach().to(dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_weight.dtype

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        # normalised in fp32, then scaled in the weights' dtype (as the model's RMSNorm; fp32: unchanged)
        x = x.float()
        return self.norm_weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(self.dtype)

    def logits(self, x: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Full-vocabulary logits, or only the vocabulary rows `rows` (a reduced head)."""
        w = self.lm_weight if rows is None else self.lm_weight.index_select(0, rows)
        b = self.lm_bias if (self.lm_bias is None or rows is None) else self.lm_bias.index_select(0, rows)
        return F.linear(self.normed(x), w, b)


class ExitHeads:
    """Trained exit heads for one model. `logits(hidden, E)`: adapter -> frozen norm -> LM head."""

    def __init__(self, meta: HeadsMeta, adapters: dict[int, LinearAdapter], frozen: FrozenHead,
                 vocab_order: torch.Tensor | None = None, path: Path | None = None):
        self.meta, self.adapters, self.frozen = meta, adapters, frozen
        self.vocab_order = vocab_order
        self.path = path

    @property
    def exits(self) -> list[int]:
        return sorted(self.adapters)

    @property
    def kind(self) -> str:
        return self.meta.kind

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the heads compute in (fp32, or the model's when loaded for drafting)."""
        return self.frozen.dtype

    @property
    def device(self) -> torch.device:
        return self.frozen.lm_weight.device

    def params(self) -> int:
        """Parameters a head adds on top of the shared norm + LM head (per exit)."""
        return int(self.meta.params.get("per_exit", params_info(self.meta.hidden_size)["per_exit"]))

    def _adapter(self, exit_layer: int) -> LinearAdapter:
        if exit_layer not in self.adapters:
            raise UserError(f"the exit heads{' in ' + str(self.path) if self.path else ''} have no head for "
                            f"exit layer {exit_layer}",
                            f"use one of the trained exits {self.exits} or train it with `ppsd heads train --exits "
                            f"{exit_layer}`")
        return self.adapters[exit_layer]

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor, exit_layer: int) -> torch.Tensor:
        """hidden [..., H] after decoder layer `exit_layer` -> full-vocabulary logits [..., vocab]."""
        return self.frozen.logits(self._adapter(exit_layer)(hidden))

    def vocab_head(self, size: int):
        from runtime.heads.vocab import VocabHead

        if self.vocab_order is None:
            raise UserError("these exit heads carry no token frequencies for a reduced-vocabulary head",
                            "re-train them with `ppsd heads train`")
        if not 0 < size <= self.meta.vocab_size:
            raise UserError(f"a reduced vocabulary of {size} tokens does not fit this model's {self.meta.vocab_size}",
                            f"give sizes between 1 and {self.meta.vocab_size}")
        return VocabHead(self, self.vocab_order[:size])


def save_adapter(folder: Path, exit_layer: int, adapter: LinearAdapter, info: dict | None = None) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / exit_file(exit_layer)
    tmp = folder / f".{target.name}.tmp"
    save_file({"weight": adapter.weight.detach().contiguous(), "bias": adapter.bias.detach().contiguous()},
              str(tmp), metadata={k: str(v) for k, v in (info or {}).items()})
    tmp.replace(target)


def save_vocab(folder: Path, order: torch.Tensor) -> None:
    from safetensors.torch import save_file

    tmp = folder / f".{VOCAB_FILE}.tmp"
    save_file({"order": order.to(torch.int64).contiguous()}, str(tmp))
    tmp.replace(folder / VOCAB_FILE)


def write_meta(folder: Path, meta: HeadsMeta) -> None:
    if not meta.created:
        meta.created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    atomic_write_json(Path(folder) / HEADS_FILE, meta.to_json())


def read_meta(folder: str | Path) -> HeadsMeta:
    folder = Path(folder).expanduser()
    file = folder / HEADS_FILE
    if not folder.is_dir():
        raise UserError(f"head folder {folder} does not exist", "give a folder written by `ppsd heads train --out DIR`")
    if not file.is_file():
        raise UserError(f"{folder} is not an exit-head folder (no {HEADS_FILE})",
                        "give a folder written by `ppsd heads train --out DIR`")
    try:
        obj = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{file} is not valid JSON ({exc.__class__.__name__})",
                        "re-train the heads with `ppsd heads train`") from None
    return HeadsMeta.from_json(obj, file)


def check_compatible(meta: HeadsMeta, adapter, where: Path) -> None:
    """Refuse heads made for another model: id, layer count, hidden size and vocabulary must agree."""
    checks = [("model", meta.model_id, adapter.model_id), ("layer count", meta.num_layers, adapter.num_layers),
              ("hidden size", meta.hidden_size, adapter.hidden_size), ("vocabulary size", meta.vocab_size,
                                                                      adapter.vocab_size)]
    for what, theirs, ours in checks:
        if theirs != ours:
            raise UserError(f"the exit heads in {where} were trained for {meta.model_id} ({meta.num_layers} layers), "
                            f"not this model {adapter.model_id} ({adapter.num_layers} layers): {what} {theirs} != {ours}",
                            f"train heads for this model with `ppsd heads train --model {adapter.model_id} --out DIR`")


def load_heads(folder: str | Path, adapter, exits: list[int] | None = None,
               dtype: torch.dtype | None = None) -> ExitHeads:
    """Load the heads in `folder` for `adapter` (a ModelAdapter), on its device, computing in `dtype`
    (default fp32, for evaluation; drafting passes the model's dtype). Raises UserError when they
    belong to another model or layer count, when an exit in `exits` (default: every exit heads.json
    lists) has no weights, or when a weight file is damaged."""
    dtype = dtype or torch.float32
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder).expanduser()
    meta = read_meta(folder)
    check_compatible(meta, adapter, folder)
    wanted = meta.exits if exits is None else sorted(set(int(e) for e in exits))
    missing = [e for e in wanted if e not in meta.exits or not (folder / exit_file(e)).is_file()]
    if missing:
        raise UserError(f"the head folder {folder} has no trained head for exit layer(s) {missing} "
                        f"(it has {meta.exits or 'none'})",
                        f"train them with `ppsd heads train --model {meta.model_id} --exits "
                        f"{','.join(map(str, missing))} --out {folder}`, or pick a trained exit")
    adapters: dict[int, LinearAdapter] = {}
    H = meta.hidden_size
    for e in wanted:
        try:
            tensors = load_file(str(folder / exit_file(e)))
        except (SafetensorError, OSError, ValueError) as exc:
            raise UserError(f"{folder / exit_file(e)} is damaged ({exc.__class__.__name__})",
                            f"re-train exit {e} with `ppsd heads train`") from None
        w, b = tensors.get("weight"), tensors.get("bias")
        if w is None or b is None or tuple(w.shape) != (H, H) or tuple(b.shape) != (H,):
            raise UserError(f"{folder / exit_file(e)} does not hold a {H}x{H} adapter",
                            f"re-train exit {e} with `ppsd heads train`")
        mod = LinearAdapter(H)
        with torch.no_grad():
            mod.weight.copy_(w)
            mod.bias.copy_(b)
        mod.requires_grad_(False)
        adapters[e] = mod.to(adapter.device, dtype)
    order = None
    if (folder / VOCAB_FILE).is_file():
        order = load_file(str(folder / VOCAB_FILE))["order"].to(adapter.device)
    return ExitHeads(meta, adapters, FrozenHead(adapter, dtype), order, folder)
