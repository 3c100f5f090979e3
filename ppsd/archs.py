"""Decoder-only model shapes for analytic (roofline) profiles, torch-free.

A shape is everything the roofline needs to count bytes and FLOPs of one decode step: hidden size,
MLP width, layer count, attention heads and KV heads (grouped-query attention shrinks the KV cache),
vocabulary (LM-head size), whether the LM head shares the embedding matrix, and the longest context.

The built-in shapes are transcribed from the models' published Hugging Face `config.json` files
(named next to each entry). Any other Llama-style causal LM is read from its own `config.json`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ppsd.errors import UserError

# Hugging Face `model_type`s whose decoder layer is the Llama block (RMSNorm, q/k/v/o attention
# with optional GQA, gated SiLU MLP of three matrices). Only for these is our byte count right.
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


@dataclass(frozen=True)
class ArchShape:
    """One decoder-only transformer, as far as decode cost is concerned."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    tied_embeddings: bool
    max_context: int
    head_dim: int | None = None  # None: hidden_size // num_heads (true for every built-in)
    qkv_bias: bool = False  # Qwen2 adds biases to q/k/v; a few thousand bytes, counted anyway
    architecture: str = "LlamaForCausalLM"
    source: str = "builtin"

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V) for one token: grouped-query models keep fewer KV heads."""
        return self.num_kv_heads * self.dim_per_head

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.dim_per_head

    def layer_params(self) -> int:
        """Parameters of one decoder layer: q, k, v, o projections, the three MLP matrices and the
        two RMSNorm weight vectors."""
        h = self.hidden_size
        attn = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.qkv_bias:
            attn += self.q_dim + 2 * self.kv_dim
        mlp = 3 * h * self.intermediate_size
        return attn + mlp + 2 * h

    def head_params(self) -> int:
        """Final RMSNorm + LM head (read in full every step, tied or not)."""
        return self.hidden_size + self.vocab_size * self.hidden_size

    def total_params(self) -> int:
        emb = self.vocab_size * self.hidden_size
        head = self.hidden_size + (0 if self.tied_embeddings else emb)
        return emb + self.num_layers * self.layer_params() + head

    def to_dict(self) -> dict:
        d = asdict(self)
        d["head_dim"] = self.dim_per_head
        d["params"] = self.total_params()
        return d


def _shape(name, hidden, inter, layers, heads, kv, vocab, tied, ctx, **kw) -> ArchShape:
    return ArchShape(name=name, hidden_size=hidden, intermediate_size=inter, num_layers=layers, num_heads=heads,
                     num_kv_heads=kv, vocab_size=vocab, tied_embeddings=tied, max_context=ctx, **kw)


# name -> shape, from the published config.json of the Hugging Face repository in the comment.
BUILTIN_ARCHS: dict[str, ArchShape] = {
    # meta-llama/Llama-2-7b-hf
    "llama-2-7b": _shape("llama-2-7b", 4096, 11008, 32, 32, 32, 32000, False, 4096),
    # meta-llama/Llama-2-13b-hf
    "llama-2-13b": _shape("llama-2-13b", 5120, 13824, 40, 40, 40, 32000, False, 4096),
    # meta-llama/Llama-2-70b-hf (grouped-query attention: 8 KV heads)
    "llama-2-70b": _shape("llama-2-70b", 8192, 28672, 80, 64, 8, 32000, False, 4096),
    # lmsys/vicuna-7b-v1.3 (the Spec-Bench / PPSD-paper Vicuna; LLaMA-1 based, 2048 context).
    # v1.5 (Llama-2 based) has the same shape with 4096 context.
    "vicuna-7b": _shape("vicuna-7b", 4096, 11008, 32, 32, 32, 32000, False, 2048),
    # lmsys/vicuna-13b-v1.3
    "vicuna-13b": _shape("vicuna-13b", 5120, 13824, 40, 40, 40, 32000, False, 2048),
    # meta-llama/Meta-Llama-3-8B
    "llama-3-8b": _shape("llama-3-8b", 4096, 14336, 32, 32, 8, 128256, False, 8192),
    # Qwen/Qwen2.5-7B (q/k/v carry biases)
    "qwen2.5-7b": _shape("qwen2.5-7b", 3584, 18944, 28, 28, 4, 152064, False, 131072, qkv_bias=True,
                         architecture="Qwen2ForCausalLM"),
    # HuggingFaceTB/SmolLM2-135M-Instruct (the project's embedded default model)
    "smollm2-135m": _shape("smollm2-135m", 576, 1536, 30, 9, 3, 49152, True, 8192),
}

# Common spellings people type.
_ALIASES = {
    "llama2-7b": "llama-2-7b", "llama2-13b": "llama-2-13b", "llama2-70b": "llama-2-70b",
    "llama-3.1-8b": "llama-3-8b", "llama3-8b": "llama-3-8b", "qwen2.5-7b-instruct": "qwen2.5-7b",
    "meta-llama-3-8b": "llama-3-8b", "meta-llama-3.1-8b": "llama-3-8b",
    "vicuna-7b-v1.3": "vicuna-7b", "vicuna-13b-v1.3": "vicuna-13b", "smollm2-135m-instruct": "smollm2-135m",
}


def known_archs() -> list[str]:
    return sorted(BUILTIN_ARCHS)


def canonical_arch_name(name) -> str:
    """A model name as the built-in table spells it, for telling whether two profiles are of the same
    model: drops `random:` and its `?options`, an organisation or folder prefix (`meta-llama/`), a
    `.gguf` or `-hf` suffix and case, then applies the usual aliases (`vicuna-7b-v1.3` -> `vicuna-7b`).
    Names outside the table come back normalised the same way."""
    s = str(name or "").strip()
    s = s.removeprefix("random:").split("?")[0]
    s = s.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
    s = s.removesuffix(".gguf").removesuffix("-hf")
    return _ALIASES.get(s, s)


def _supported_line() -> str:
    return (f"give a built-in name ({', '.join(known_archs())}) or the path of a Hugging Face config.json "
            f"of a decoder-only causal LM (model_type {', '.join(SUPPORTED_MODEL_TYPES)})")


def resolve_arch(spec: str | ArchShape) -> ArchShape:
    """A built-in name (case-insensitive), a config.json path, or a folder holding config.json."""
    if isinstance(spec, ArchShape):
        return spec
    key = str(spec).strip().lower()
    key = _ALIASES.get(key, key)
    if key in BUILTIN_ARCHS:
        return BUILTIN_ARCHS[key]
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if path.is_file():
        return arch_from_config(path)
    raise UserError(f"unknown architecture {spec!r}", _supported_line())


def arch_from_config(path: str | Path) -> ArchShape:
    """Read a Hugging Face `config.json`; refuse anything that is not a Llama-style decoder-only LM."""
    path = Path(path)
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read {path} as a JSON config ({exc.__class__.__name__})", _supported_line()) from None
    if not isinstance(cfg, dict):
        raise UserError(f"{path} is not a JSON object", _supported_line())
    model_type = str(cfg.get("model_type", "?"))
    archs = cfg.get("architectures") or []
    if cfg.get("is_encoder_decoder"):
        raise UserError(f"{path} describes an encoder-decoder model ({model_type}), not a decoder-only causal LM",
                        _supported_line())
    if archs and not any(str(a).endswith("ForCausalLM") for a in archs):
        raise UserError(f"{path} describes {', '.join(map(str, archs))}, not a decoder-only causal LM",
                        _supported_line())
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UserError(f"{path} has model_type {model_type!r}, whose layers this estimator does not model",
                        _supported_line())
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        shape = ArchShape(
            name=str(cfg.get("_name_or_path") or path.parent.name or model_type),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            vocab_size=int(cfg["vocab_size"]),
            # the Llama-family config classes default to untied embeddings
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_context=int(cfg.get("max_position_embeddings") or 4096),
            head_dim=int(cfg["head_dim"]) if cfg.get("head_dim") else None,
            qkv_bias=bool(cfg.get("attention_bias", model_type == "qwen2")),
            architecture=str(archs[0]) if archs else f"{model_type}ForCausalLM",
            source=str(path),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path} lacks or garbles a field the estimator needs ({exc})",
                        "give a complete Hugging Face config.json (hidden_size, intermediate_size, "
                        "num_hidden_layers, num_attention_heads, vocab_size)") from None
    if shape.num_layers < 2 or min(shape.hidden_size, shape.intermediate_size, shape.num_heads,
                                   shape.num_kv_heads, shape.vocab_size) < 1:
        raise UserError(f"{path} has an impossible shape (layers={shape.num_layers}, hidden={shape.hidden_size})",
                        "give a config of a model with at least 2 decoder layers")
    return shape
