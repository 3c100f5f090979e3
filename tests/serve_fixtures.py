"""A serving profile for the simulator's tests: synthetic, with batch tables on which early-exit speculation
pays for one sequence and stops paying for eight (a pass costs as one until it holds `FREE_TOKENS` tokens over
its sequences), acceptance traces, and the generations a workload draws its prompts from."""

from __future__ import annotations

import json
from pathlib import Path

from ppsd.profile import load_profile
from ppsd.profile.synthetic import write_synthetic_profile
from sim.serve.workload import profile_prompts

LAYERS = 8
EXIT = 2
FREE_TOKENS = 4
PROMPTS = 8
GEN_LEN = 64


def write_serving_profile(out: Path, alpha: float = 0.8, prompts: int = PROMPTS):
    """The profile folder at `out` (see the module doc), loaded."""
    write_synthetic_profile(out, alpha_by_exit=lambda e: alpha, num_layers=LAYERS, layer_ms=1.0, head_ms=1.0,
                            embed_ms=0.1, batch_free_tokens=FREE_TOKENS, model_id="synthetic-serving")
    meta = json.loads((out / "profile.json").read_text())
    gens = [{"prompt_id": f"p{i}", "category": ("writing", "math")[i % 2], "prompt": f"prompt {i}",
             "prompt_tokens": list(range(20 + 6 * i)), "prompt_len": 20 + 6 * i, "token_ids": [0] * GEN_LEN}
            for i in range(prompts)]
    (out / "generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gens))
    meta["acceptance"]["generations_file"] = "generations.jsonl"
    (out / "profile.json").write_text(json.dumps(meta))
    return load_profile(out)


def serving_prompts(profile):
    """The profile's traced prompts (those of its generations that its acceptance table holds)."""
    return [p for p in profile_prompts(profile) if int(p.prompt_id[1:]) < 4]
