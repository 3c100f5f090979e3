#!/usr/bin/env bash
# Download, here (where pip can reach a package index), the wheels bench/gpu_check.sh installs on
# the lent GPU machine, which has no internet: into .whl/ (git-ignored; name `.whl` in the device
# call's carry, 64 MiB in all with the working tree).
#
#   bench/fetch_gpu_wheels.sh [--dry-run] [--dest DIR] [NAME==VERSION ...]
#
# Default list, versions read from pyproject.toml's pins (so it follows them):
#   simpy         the image has none (the simulator's event engine); no dependencies.
#   transformers  the image has 5.17.0, ppsd pins 5.24.0; its own dependencies are on the image
#                 already (huggingface-hub>=1.31,<3: 1.33.0; tokenizers>=0.23.1,<0.24: 0.23.2;
#                 safetensors>=0.8.0: 0.8.0; regex>=2025.10.22, which transformers 5.17.0 needs
#                 too; numpy, packaging, pyyaml, tqdm, typer), so none of them is carried.
# torch is never carried (hundreds of MB; the image's CUDA build is used). Extra NAME==VERSION
# arguments add wheels (e.g. a dependency `python -m bench.gpu_check_env` reports missing); pip's --no-deps
# fetches none of a wheel's dependencies, so name each one. Keep one version of each in .whl/.
#
# The platform is the lent H200 image's: CPython 3.12 on manylinux x86_64 (pure-Python wheels such
# as the two above match any platform). --dry-run prints the pip commands without running them.
set -euo pipefail
cd "$(dirname "$0")/.."

dry=0
dest=.whl
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --dest) dest=${2:?--dest needs a folder}; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *==*) extra+=("$1") ;;
    *) echo "fetch_gpu_wheels: error: unknown argument $1; give --dry-run, --dest DIR or NAME==VERSION" >&2; exit 2 ;;
  esac
  shift
done

pin() {  # the version pyproject.toml pins for $1
  sed -n "s/^ *\"$1==\([^\"]*\)\".*/\1/p" pyproject.toml | head -n1
}
wheels=()
for name in simpy transformers; do
  v=$(pin "$name")
  [ -n "$v" ] || { echo "fetch_gpu_wheels: error: pyproject.toml pins no $name; pin it or name NAME==VERSION" >&2; exit 2; }
  wheels+=("$name==$v")
done
wheels+=(${extra[@]+"${extra[@]}"})

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for w in "${wheels[@]}"; do
  cmd=("$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
       "${platforms[@]}" -d "$dest" "$w")
  if [ "$dry" = 1 ]; then
    printf '%q ' "${cmd[@]}"
    echo
  else
    "${cmd[@]}"
  fi
done
if [ "$dry" = 0 ]; then
  echo "fetch_gpu_wheels: $(ls "$dest"/*.whl | wc -l) wheel(s) in $dest ($(du -sh "$dest" | cut -f1)); name $dest in the device call's carry"
fi
