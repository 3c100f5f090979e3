"""The profile folder's files, their columns, and the readers of its tables (torch-free: `sim/` and
`dashboard/` read profiles through this package).

A profile folder holds profile.json (its fields, types, units and ranges: the generated reference in
docs/contracts.md "Profile folder", from `ppsd/profile/schema.py`, which checks every value),
acceptance.csv.gz (ACCEPTANCE_COLUMNS + ACCEPTANCE_OPTIONAL), generations.jsonl (one object per prompt:
prompt_id, category, prompt, prompt_tokens, token_ids) and optionally acceptance_sampled.csv.gz
(SAMPLED_COLUMNS + SAMPLED_OPTIONAL: β along trajectories sampled at each temperature).
"""

from __future__ import annotations

from pathlib import Path

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED

# the versions and what each added: ppsd/profile/schema.py
from ppsd.profile.schema import ACCEPTANCE_FILE, GENERATIONS_FILE, READABLE_VERSIONS, SAMPLED_FILE, SCHEMA_VERSION

SAMPLED_COLUMNS = ["head", "prompt_id", "category", "temperature", "exit_layer", "position", "beta"]
SAMPLED_BETA_DECIMALS = 3  # beta is written rounded to this many decimals (see save_profile)
# trajectory: absent in older files, read as 0 (one trajectory per prompt); confidence: each draft's
# confidence along the sampled trajectory (as the acceptance table's), absent in older files
SAMPLED_OPTIONAL = ["trajectory", "confidence"]
SAMPLED_CONFIDENCE_DECIMALS = 3
TEMPERATURE_TOL = 1e-6  # a requested temperature matches a recorded one within this
PROFILE_FILE = "profile.json"
ACCEPTANCE_COLUMNS = ["head", "prompt_id", "category", "exit_layer", "position", "match", "beta"]
# optional: the draft's confidence, the top-1 probability of the exit head's own distribution (softmax
# of its logits over its vocabulary) with a correct prefix; what a confidence stop reads (absent in
# profiles made before it: such a stop cannot be priced from them)
ACCEPTANCE_OPTIONAL = ["confidence"]


def acceptance_columns(df) -> list[str]:
    """The acceptance table's columns to store: the required ones and the optional ones `df` has."""
    return ACCEPTANCE_COLUMNS + [c for c in ACCEPTANCE_OPTIONAL if c in df.columns]
# The n grid `ppsd profile` measures by default: every n an EESD verification uses (γ + 1 for
# γ = 1..8) is measured, not interpolated, since on a CPU the cost is far from smooth in n (SmolLM2, 1
# thread: 30 layers take 88 ms at n = 2, 111 ms at n = 3 and 76 ms at n = 4, the LM head 21, 33 and
# 17 ms; the matmul kernels change with the row count), and a table over 1, 2, 4, 8 priced γ = 2
# verifications 25-40% short. 16 bounds longer verifications.
MEASURED_N_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 16)

SHARED_HEAD = SHARED  # the model's own norm + LM head as exit head (ppsd/exit_heads.py)


def malformed(path: Path, what: str) -> UserError:
    return UserError(
        f"profile {path} is malformed: {what}",
        "re-create it with `ppsd profile --out DIR` (or pick another folder)",
    )


def read_acceptance(path: Path):
    import pandas as pd

    try:
        # ids are names, not numbers: Spec-Bench ids would otherwise come back as ints
        df = pd.read_csv(path, dtype={"prompt_id": str, "category": str, "head": str})
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same user problem
        raise malformed(path.parent, f"cannot read {path.name} ({exc})") from None
    if "head" not in df.columns:
        df.insert(0, "head", SHARED_HEAD)
    missing = [c for c in ACCEPTANCE_COLUMNS if c not in df.columns]
    if missing:
        raise malformed(path.parent, f"{path.name} lacks columns {missing}")
    return df


def read_sampled(path: Path):
    """The sampled-trajectory beta table (SAMPLED_COLUMNS)."""
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype={"prompt_id": str, "category": str, "head": str})
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same user problem
        raise malformed(path.parent, f"cannot read {path.name} ({exc})") from None
    missing = [c for c in SAMPLED_COLUMNS if c not in df.columns]
    if missing:
        raise malformed(path.parent, f"{path.name} lacks columns {missing}")
    if "trajectory" not in df.columns:
        df["trajectory"] = 0
    return df
