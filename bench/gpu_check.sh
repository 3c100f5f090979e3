#!/usr/bin/env bash
# The GPU check (issue 7): on a CUDA machine, profile a real-size random-weight model (default
# Llama-2-7B shape, bf16) with CUDA events, replay traces through the real runtime (AR, EESD, and
# PPSD where there are >= 2 GPUs), write the profile, the validation folder, the roofline estimate
# and its calibration under $OUT (or --out DIR). ≤ 8 minutes on one H200.
#
#   bench/gpu_check.sh [--out DIR] [--model random:ARCH] [--hardware H] [--budget-s S]
#   bench/gpu_check.sh --cpu-dry-run --out DIR      # same pipeline, CPU, small model (tests)
#
# Python: $PYTHON, else .venv/bin/python, else python3 (it needs ppsd's dependencies and torch; on a
# GPU machine a CUDA build of torch). See bench/gpu_check.py for the phases and the outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Wheels carried in .whl/ (a machine that cannot fetch packages: simpy, the pinned transformers)
# go into a private folder ahead of what the Python has, when it lacks simpy or the pinned transformers.
pinned=$(sed -n 's/^ *"transformers==\([^"]*\)".*/\1/p' pyproject.toml)
if compgen -G ".whl/*.whl" >/dev/null && ! "$PY" -c "import simpy, transformers as t; assert t.__version__ == '$pinned'" 2>/dev/null; then
  echo "gpu_check: installing carried wheels: $(cd .whl && ls *.whl | tr '\n' ' ')"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ppsd-site .whl/*.whl
  export PYTHONPATH="/tmp/ppsd-site${PYTHONPATH:+:$PYTHONPATH}"
fi
missing=$("$PY" -c 'import importlib.util as u; print(" ".join(m for m in ("torch", "transformers", "simpy", "numpy", "pandas", "rich") if u.find_spec(m) is None))')
if [ -n "$missing" ]; then
  echo "gpu_check: error: $PY lacks $missing; install ppsd's dependencies (pip install -e .) or carry their wheels in .whl/" >&2
  exit 2
fi
exec "$PY" bench/gpu_check.py "$@"
