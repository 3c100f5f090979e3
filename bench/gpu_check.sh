#!/usr/bin/env bash
# The GPU check: on a CUDA machine, profile a real-size random-weight model (default
# Llama-2-7B shape, bf16) with CUDA events, measure the hop and the two-stage pipeline probe (two
# spawned processes: one per GPU over NCCL, or both on the one GPU over gloo), replay traces through
# the real runtime (AR, EESD, and PPSD where there are >= 2 GPUs), set the roofline estimate and its
# calibration beside the measurement, and train / evaluate exit heads on the device. It runs from the
# project root (it cd's there) as `python -m bench.gpu_check`; see bench/gpu_check.py for the phases and
# what each file holds.
#
#   bench/gpu_check.sh [--out DIR] [--model random:ARCH] [--hardware H] [--budget-s S] [--deadline-s S]
#                      [--allow-transformers-mismatch] [--no-heads]
#   bench/gpu_check.sh --cpu-dry-run --out DIR      # the same steps on CPU, small models (tests)
#   bench/gpu_check.sh --env-only                   # stop after the Python / wheels / imports check
#
# Results: the output folder (--out DIR, else $OUT, else runs/gpu-check-<time>) receives exactly two
# files, whatever happens after the Python is chosen: gpu_check-<model>-<device>.tgz, the whole
# result folder (profile, validation, estimate, calibration, heads, the summary and the full log
# gpu_check.log), and gpu_check-<model>-<device>.json, the summary beside it (gpu_check-environment.*
# when the environment check stops the run). The check works in a private folder outside the output
# folder and the archive is built outside the folder it archives, then moved in: it never packs
# itself, and a device that brings back a few files brings back everything in one.
#
# Time: the phases aim at --budget-s (gpu_check.py: 380 s on a GPU); --deadline-s (default 480 on a
# GPU, 600 for the dry run) is the hard stop for the whole script, start-up included: the Python is
# stopped in time to pack the results (about 10 s) before it. Give the device call a limit above it
# (540 s): the whole check stays within 8 minutes on one H200 and its results come back in the call.
#
# Python: the first of $PYTHON, .venv/bin/python, python3, /opt/torch/.venv/bin/python3 whose torch
# sees a CUDA GPU (with --cpu-dry-run: the first that has torch). The lent H200 image has Python
# 3.12 with a CUDA torch and most of ppsd's dependencies, but no simpy and transformers 5.17.0 where
# ppsd pins 5.24.0, and no internet. Those two come as wheels carried in .whl/ (git-ignored: fetch
# them here with bench/fetch_gpu_wheels.sh; name .whl in the device call's carry); the first line
# this script prints says whether they are there:
#   simpy==4.1.2          absent there (the simulator's event engine); no dependencies.
#   transformers==5.24.0  the pin; its dependencies are on the image already: huggingface-hub>=1.31,<3
#                         (1.33.0), tokenizers>=0.23.1,<0.24 (0.23.2), safetensors>=0.8.0 (0.8.0),
#                         regex>=2025.10.22 (transformers 5.17.0 there needs the same), numpy,
#                         packaging, pyyaml, tqdm, typer.
# Only the wheels whose version this Python lacks are installed, into a private folder put first on
# PYTHONPATH (the image stays untouched; $PPSD_SITE, default /tmp/ppsd-site; wheels from $PPSD_WHEELS,
# default .whl). Then `python -m bench.gpu_check_env` checks every import with the fix named, refuses a
# transformers other than the pin unless --allow-transformers-mismatch, and with it checks the calls
# ppsd makes against that transformers (decoder-layer arguments, the init helper, a cached step).
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

why=""
err() { why="$*"; echo "gpu_check: error: $*" >&2; exit 2; }

cpu=0
env_only=0
env_flags=()
args=()
out="${OUT:-}"
deadline=""
prev=""
for a in "$@"; do
  case "$prev" in
    --out) out="$a"; prev=""; continue ;;          # the script's own: the Python gets the work folder
    --deadline-s) deadline="$a"; prev=""; continue ;;
  esac
  prev="$a"
  case "$a" in
    --out|--deadline-s) continue ;;
    --out=*) out="${a#--out=}"; continue ;;
    --deadline-s=*) deadline="${a#--deadline-s=}"; continue ;;
    --cpu-dry-run) cpu=1 ;;
    --allow-transformers-mismatch) env_flags+=(--allow-transformers-mismatch) ;;
    --env-only) env_only=1; continue ;;
  esac
  args+=("$a")
done
case "$prev" in --out|--deadline-s) err "$prev needs a value" ;; esac
[ "${PPSD_GPU_CHECK_CPU:-}" = 1 ] && cpu=1
[ "$cpu" = 1 ] && env_flags+=(--cpu)
if [ -z "$deadline" ]; then
  if [ "$cpu" = 1 ]; then deadline=600; else deadline=480; fi
fi
case "$deadline" in ''|*[!0-9]*) err "--deadline-s takes whole seconds (got '$deadline')" ;; esac
[ "$deadline" -ge 60 ] || err "--deadline-s $deadline leaves no time for the check; give 60 or more (default 480)"

# --- the carried wheels, said first (seconds into the run): a missing .whl/ is the usual failure ------
wheels="${PPSD_WHEELS:-.whl}"
if compgen -G "$wheels/*.whl" >/dev/null; then
  echo "gpu_check: carried wheels in $wheels/: $(cd "$wheels" && ls -- *.whl | tr '\n' ' ')"
else
  echo "gpu_check: no carried wheels in $wheels/ (git-ignored: run bench/fetch_gpu_wheels.sh where pip can" \
       "download and name $wheels in the device call's carry); fine where this Python has simpy and transformers" \
       "$(sed -n 's/^ *"transformers==\([^"]*\)".*/\1/p' pyproject.toml | head -n1), else the environment check stops the run"
fi

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

# --- from here on the output folder gets its archive and summary, however the run ends ----------------
[ -n "$out" ] || out="runs/gpu-check-$(date +%Y%m%d-%H%M%S)"
if [ "$env_only" = 0 ]; then
  mkdir -p "$out" || err "cannot create the output folder $out"
  out=$(cd "$out" && pwd)
  stage=$(mktemp -d "${TMPDIR:-/tmp}/ppsd-gpu-check.XXXXXX") || err "cannot create a work folder in ${TMPDIR:-/tmp}"
  work="$stage/gpu-check"  # what the archive holds: outside the output folder, and the archive outside it
  mkdir -p "$work"
  log="$work/gpu_check.log"
  : >"$log"
fi
pack() {  # the result folder as one archive + its summary, into the output folder (temp name, then rename)
  local rc=$?
  trap - EXIT INT TERM
  [ -n "${work:-}" ] && [ -d "$work" ] || exit "$rc"
  local summary name
  summary=$(cd "$work" && ls -t -- gpu_check-*.json 2>/dev/null | head -n1)
  name=$(basename "${summary:-gpu_check-environment.json}" .json)
  if [ -z "$summary" ] && [ -n "$why" ]; then  # stopped before any summary (installing the wheels): say why
    summary="$name.json"
    printf '%s' "$why" | "$PY" -c 'import json, sys
print(json.dumps({"phase": "start-up", "status": "failed", "error": sys.stdin.read()}, indent=1))' >"$work/$summary"
  fi
  mv "$work" "$stage/$name" && work="$stage/$name"  # the archive unpacks into a folder named after the run
  if tar -czf "$stage/$name.tgz" -C "$stage" "$name"; then
    mv -f "$stage/$name.tgz" "$out/.$name.tgz.partial" && mv -f "$out/.$name.tgz.partial" "$out/$name.tgz"
  else
    echo "gpu_check: error: packing $work failed" >&2
  fi
  if [ -n "$summary" ]; then
    cp -f "$work/$summary" "$out/.$name.json.partial" && mv -f "$out/.$name.json.partial" "$out/$name.json"
  fi
  local mb
  mb=$(du -m "$out/$name.tgz" 2>/dev/null | cut -f1)
  echo "gpu_check: results: $out/$name.tgz (${mb:-?} MB: every file and the log)${summary:+, $out/$name.json}"
  [ "${mb:-0}" -lt 15 ] || echo "gpu_check: warning: the archive is ${mb} MB; a device call brings back files of at most 16 MiB"
  rm -rf "$stage"
  exit "$rc"
}
[ "$env_only" = 0 ] && trap pack EXIT && trap 'exit 143' TERM && trap 'exit 130' INT
say() { if [ -n "${log:-}" ]; then tee -a "$log"; else cat; fi; }

# --- carried wheels: install those this Python lacks, into a private folder ahead of the image -------
if compgen -G "$wheels/*.whl" >/dev/null; then
  need=$("$PY" -m bench.gpu_check_env --wheels-needed "$wheels") || err "could not read the wheels in $wheels/"
  if [ -n "$need" ]; then
    site="${PPSD_SITE:-/tmp/ppsd-site}"
    echo "gpu_check: installing carried wheels into $site: $(echo $need | xargs -n1 basename | tr '\n' ' ')" | say
    # shellcheck disable=SC2086 # one path a word
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" $need 2>&1 | say
    [ "${PIPESTATUS[0]}" = 0 ] \
      || err "installing the carried wheels failed; keep one version of each in $wheels/, built for this Python (bench/fetch_gpu_wheels.sh fetches them for Python 3.12 on manylinux x86_64)"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi

# --- every import, the versions after installing, the transformers pin and calls ----------------------
# a failure here still leaves gpu_check-environment.json (and the archive with the log)
[ "$env_only" = 0 ] && env_flags+=(--summary "$work/gpu_check-environment.json")
errf=$(mktemp "${TMPDIR:-/tmp}/ppsd-gpu-check-env.XXXXXX")
"$PY" -m bench.gpu_check_env --wheels "$wheels" ${env_flags[@]+"${env_flags[@]}"} 2>"$errf" | say
st=${PIPESTATUS[0]}
if [ -s "$errf" ]; then  # its one error line: on stderr, and in the log
  [ -n "${log:-}" ] && cat "$errf" >>"$log"
  cat "$errf" >&2
fi
rm -f "$errf"
[ "$st" = 0 ] || exit 2
[ "$env_only" = 1 ] && { echo "gpu_check: environment ready ($PY)"; exit 0; }

# --- the check, stopped in time to pack -------------------------------------------------------------
# its own stop (counted from when it is armed, after its imports) comes first; the kill 15 s later
# is for a Python stuck where no signal handler runs, and still leaves time to pack before the deadline
left=$(( deadline - SECONDS - 30 ))
[ "$left" -gt 30 ] || err "only ${left} s of --deadline-s ${deadline} left after the start-up; raise --deadline-s"
rm -f "$work/gpu_check-environment.json"  # passed: the check's own summary names the run
kill_later=()
command -v timeout >/dev/null && kill_later=(timeout -k 10 $(( left + 15 )))
{ ${kill_later[@]+"${kill_later[@]}"} "$PY" -m bench.gpu_check --out "$work" --stop-after-s "$left" ${args[@]+"${args[@]}"}; \
  echo $? >"$stage/rc"; } 2>&1 | say
rc=$(cat "$stage/rc" 2>/dev/null || echo 1)
if [ "$rc" != 0 ]; then
  line=$(grep '^gpu_check: error:' "$log" | tail -n1)
  echo "${line:-gpu_check: error: python -m bench.gpu_check exited with code $rc (see $log in the archive)}" >&2
fi
exit "$rc"
