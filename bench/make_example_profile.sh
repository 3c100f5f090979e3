#!/usr/bin/env bash
# Regenerate the committed example profile: SmolLM2-135M on this CPU, Spec-Bench prompts
# (4 per category, 64 new tokens). Run it on an idle machine: the latency tables are only as
# quiet as the machine. Extra arguments go to `ppsd profile` (e.g. --repeats 30).
# HEADS=DIR (optional): a folder from `ppsd heads train`; the profile then also records the trained
# and reduced-vocabulary heads' drafting latency and acceptance rows (`ppsd plan` compares them), on
# prompts the heads were not trained on (--heldout). The committed example was made with
#   .venv/bin/python -m ppsd heads train --model smollm2-135m --exits 15,20,24,27      (about 3 min)
#   HEADS=~/.cache/ppsd/heads/smollm2-135m bench/make_example_profile.sh
# TEMPERATURES (default 0.7,1.0): beta along sampled trajectories at these temperatures ("" for none);
# TRAJECTORIES (default 3) sampled continuations per prompt and temperature (one alone moves a plan's
# acceptance by up to 0.08 from seed to seed).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-.venv/bin/python}
OUT=${OUT:-examples/smollm2-135m-cpu}
TEMPS=${TEMPERATURES-0.7,1.0}
TRAJ=${TRAJECTORIES:-3}
"$PY" -m ppsd profile --model smollm2-135m --device cpu --dtype float32 \
  --prompts spec-bench --per-category 4 --max-new-tokens 64 \
  --repeats "${REPEATS:-20}" ${HEADS:+--heads "$HEADS" --heldout} \
  ${TEMPS:+--temperatures "$TEMPS" --sampled-trajectories "$TRAJ"} --out "$OUT" "$@"
du -sh "$OUT"
