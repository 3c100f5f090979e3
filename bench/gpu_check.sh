#!/usr/bin/env bash
# The GPU check (issue 7): on a CUDA machine, profile a real-size random-weight model (default
# Llama-2-7B shape, bf16) with CUDA events, replay traces through the real runtime (AR, EESD, and
# PPSD where there are >= 2 GPUs), write the profile, the validation folder, the roofline estimate
# and its calibration under $OUT (or --out DIR), and a summary JSON that records every phase's
# status and error even when one fails. The phases aim at --budget-s (450 s); with this script's
# start-up (choosing the Python, installing the carried wheels: under a minute) the whole check
# stays within 10 minutes on one H200.
#
#   bench/gpu_check.sh [--out DIR] [--model random:ARCH] [--hardware H] [--budget-s S]
#                      [--allow-transformers-mismatch]
#   bench/gpu_check.sh --cpu-dry-run --out DIR      # same pipeline, CPU, small model (tests)
#   bench/gpu_check.sh --env-only                   # stop after the Python / wheels / imports check
#
# Python: the first of $PYTHON, .venv/bin/python, python3, /opt/torch/.venv/bin/python3 whose torch
# sees a CUDA GPU (with --cpu-dry-run: the first that has torch). The lent H200 image has Python
# 3.12 with a CUDA torch and most of ppsd's dependencies, but no simpy and transformers 5.17.0 where
# ppsd pins 5.24.0, and no internet. Those two come as wheels carried in .whl/ (fetch them here with
# bench/fetch_gpu_wheels.sh; name .whl in the device call's carry):
#   simpy==4.1.2          absent there (the simulator's event engine); no dependencies.
#   transformers==5.24.0  the pin; its dependencies are on the image already: huggingface-hub>=1.31,<3
#                         (1.33.0), tokenizers>=0.23.1,<0.24 (0.23.2), safetensors>=0.8.0 (0.8.0),
#                         regex>=2025.10.22 (transformers 5.17.0 there needs the same), numpy,
#                         packaging, pyyaml, tqdm, typer.
# Only the wheels whose version this Python lacks are installed, into a private folder put first on
# PYTHONPATH (the image stays untouched; $PPSD_SITE, default /tmp/ppsd-site; wheels from $PPSD_WHEELS,
# default .whl). Then bench/gpu_check_env.py checks every import with the
# fix named, and refuses a transformers other than the pin unless --allow-transformers-mismatch.
# See bench/gpu_check.py for the phases and the outputs.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

err() { echo "gpu_check: error: $*" >&2; exit 2; }

cpu=0
env_only=0
env_flags=()
args=()
out="${OUT:-}"
prev=""
for a in "$@"; do
  [ "$prev" = --out ] && out="$a"
  prev="$a"
  case "$a" in
    --out=*) out="${a#--out=}" ;;
    --cpu-dry-run) cpu=1 ;;
    --allow-transformers-mismatch) env_flags+=(--allow-transformers-mismatch) ;;
    --env-only) env_only=1; continue ;;  # this script's own flag: not passed on
  esac
  args+=("$a")
done
[ "${PPSD_GPU_CHECK_CPU:-}" = 1 ] && cpu=1
[ "$cpu" = 1 ] && env_flags+=(--cpu)

# --- the Python: the first whose torch sees CUDA (or has torch at all, for the dry run) -------------
probe='import sys
try:
    import torch
except Exception as exc:
    print("no torch (%s)" % exc.__class__.__name__); sys.exit(1)
ok = torch.cuda.is_available()
print("torch %s, CUDA build %s, %s" % (torch.__version__, torch.version.cuda, "sees %d GPU(s)" % torch.cuda.device_count() if ok else "no GPU visible"))
sys.exit(0 if ok or sys.argv[1] == "1" else 1)'
PY=""
tried=()
seen=" "
for c in "${PYTHON:-}" .venv/bin/python python3 /opt/torch/.venv/bin/python3; do
  [ -n "$c" ] || continue
  path=$(command -v "$c" 2>/dev/null) || continue
  real=$(readlink -f "$path" 2>/dev/null || echo "$path")
  case "$seen" in *" $real "*) continue ;; esac  # the same interpreter under another name
  seen="$seen$real "
  if said=$("$c" -c "$probe" "$cpu" 2>/dev/null); then
    PY=$c
    echo "gpu_check: python $c: $said"
    break
  fi
  tried+=("$c: ${said:-does not start}")
done
if [ -z "$PY" ]; then
  list=$(printf '%s; ' ${tried[@]+"${tried[@]}"})
  if [ "$cpu" = 1 ]; then
    err "no Python with torch found (${list%; }); install ppsd's dependencies (pip install -e .) or set PYTHON"
  fi
  err "no CUDA GPU visible to torch in any Python tried (${list%; }); run this on a GPU machine (or set PYTHON to a CUDA build of torch), or pass --cpu-dry-run"
fi

# --- carried wheels: install those this Python lacks, into a private folder ahead of the image -------
wheels="${PPSD_WHEELS:-.whl}"
if compgen -G "$wheels/*.whl" >/dev/null; then
  need=$("$PY" bench/gpu_check_env.py --wheels-needed "$wheels") || err "could not read the wheels in $wheels/"
  if [ -n "$need" ]; then
    site="${PPSD_SITE:-/tmp/ppsd-site}"
    echo "gpu_check: installing carried wheels into $site: $(echo $need | xargs -n1 basename | tr '\n' ' ')"
    # shellcheck disable=SC2086 # one path a word
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" $need \
      || err "installing the carried wheels failed; keep one version of each in $wheels/, built for this Python (bench/fetch_gpu_wheels.sh fetches them for Python 3.12 on manylinux x86_64)"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi

# --- every import, the versions after installing, the transformers pin ------------------------------
# a failure here still leaves a summary under the output folder (when one is named)
[ -n "$out" ] && env_flags+=(--summary "$out/gpu_check-environment.json")
"$PY" bench/gpu_check_env.py --wheels "$wheels" ${env_flags[@]+"${env_flags[@]}"} || exit 2
[ "$env_only" = 1 ] && { echo "gpu_check: environment ready ($PY)"; exit 0; }
exec "$PY" bench/gpu_check.py ${args[@]+"${args[@]}"}
