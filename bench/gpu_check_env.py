"""The environment check bench/gpu_check.sh runs before the GPU check: every package the check
imports, each with the fix named when it is missing, and the transformers pin enforced.

    python -m bench.gpu_check_env [--cpu] [--allow-transformers-mismatch]
    python -m bench.gpu_check_env --wheels-needed .whl    # carried wheels this Python lacks (paths)

Run from the project root (gpu_check.sh cd's there): the root on sys.path is what makes ppsd's own
packages importable on a machine where ppsd is not installed (the lent GPU image), for the
transformers calls checked under --allow-transformers-mismatch.

Prints one line per package (version, where it was imported from); exits 2 with one
`gpu_check: error: ...` line on stderr when something is missing or off. Nothing here needs a GPU.

Why transformers is pinned: the profiles, the stage code and the golden figures follow
transformers 5.24.0 (the decoder-layer call, the rotary module and the no-init helpers are
version-sensitive); the lent GPU image has 5.17.0, so the pinned wheel is carried (.whl/, fetched by
bench/fetch_gpu_wheels.sh). With --allow-transformers-mismatch another version is accepted only
once the calls ppsd makes check out against it (runtime/llm.py `transformers_call_problems`: the
decoder layers' argument names, the init helper, a cached step on tiny models). torch is not
carried (far over the 64 MiB a device call may carry): the image's CUDA build is used and its
version recorded beside the project's pin.
gguf is not checked: it only converts `.gguf` models, and the GPU check times `random:ARCH` models.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEEL_DIR = ".whl"
FETCH = "run bench/fetch_gpu_wheels.sh where pip can download, then carry .whl to the GPU machine (gpu_check.sh installs it)"

# (module, distribution, what ppsd uses it for)
NEEDED = [
    ("torch", "torch", "the model and the runtime"),
    ("transformers", "transformers", "the decoder layers (Llama / Qwen2 / Mistral)"),
    ("simpy", "simpy", "the simulator's event engine"),
    ("numpy", "numpy", "tables and statistics"),
    ("scipy", "scipy", "the restart rule (sim/model/restart.py)"),
    ("pandas", "pandas", "acceptance tables"),
    ("rich", "rich", "progress bars and tables"),
    ("pydantic", "pydantic", "the profile schema (ppsd/profile/schema.py)"),
    ("huggingface_hub", "huggingface-hub", "transformers' configs and tokenizers"),
    ("tokenizers", "tokenizers", "transformers' tokenizers"),
    ("safetensors", "safetensors", "weights and exit heads on disk"),
    ("accelerate", "accelerate", "transformers' device and init helpers (pinned by ppsd)"),
]
CARRIED = {"simpy", "transformers"}  # the wheels bench/fetch_gpu_wheels.sh fetches by default


def pins() -> dict[str, str]:
    """name -> version of every `name==version` dependency in pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r'"([A-Za-z0-9_.-]+)==([^"\s;]+)"', text)}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name_version(path: Path) -> tuple[str, str]:
    """simpy-4.1.2-py3-none-any.whl -> ("simpy", "4.1.2") (the wheel file-name convention)."""
    parts = path.name.split("-")
    return _norm(parts[0]), parts[1]


def installed_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def wheels_needed(folder: Path) -> list[Path]:
    """Carried wheels whose package this Python lacks or has at another version."""
    out = []
    for whl in sorted(folder.glob("*.whl")):
        name, version = wheel_name_version(whl)
        if installed_version(name) != version:
            out.append(whl)
    return out


SUMMARY: Path | None = None  # --summary: where a failed check leaves its one-line reason as JSON


def fail(msg: str) -> int:
    print(f"gpu_check: error: {msg}", file=sys.stderr, flush=True)
    if SUMMARY is not None:  # the check's summary exists even when the environment stops it
        import json
        import os

        SUMMARY.parent.mkdir(parents=True, exist_ok=True)
        tmp = SUMMARY.with_name(SUMMARY.name + ".partial")
        tmp.write_text(json.dumps({"phase": "environment", "status": "failed", "error": msg,
                                   "python": sys.executable}, indent=1) + "\n")
        os.replace(tmp, SUMMARY)
    return 2


def check(cpu: bool, allow_transformers_mismatch: bool, wheel_dir: Path | None = None) -> int:
    pinned = pins()
    carried = {wheel_name_version(w)[0]: w.name for w in sorted((wheel_dir or ROOT / WHEEL_DIR).glob("*.whl"))}
    problems = []
    versions = {}
    for module, dist, why in NEEDED:
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - ImportError, or a dependency check inside the package
            last = (str(exc).strip().splitlines() or [exc.__class__.__name__])[-1]
            if module == "torch":
                fix = "run with a Python whose torch is a CUDA build (PYTHON=/opt/torch/.venv/bin/python3)"
            elif dist in CARRIED:
                fix = FETCH
            else:
                want = f"{dist}=={pinned[dist]}" if dist in pinned else dist
                fix = (f"pip install {want}, or carry its wheel (bench/fetch_gpu_wheels.sh {want}) "
                       "with its dependencies")
            problems.append(f"{module} ({why}) cannot be imported: {last}; {fix}")
            continue
        version = getattr(mod, "__version__", None) or installed_version(dist) or "?"
        versions[module] = version
        where = Path(getattr(mod, "__file__", "") or "?").parent
        pin = pinned.get(dist)
        note = "" if pin is None or version.split("+")[0] == pin else f"  (ppsd pins {pin})"
        print(f"  {module:16} {version:16} {where}{note}")
    if problems:
        return fail(problems[0] + (f" (and {len(problems) - 1} more: "
                                   + ", ".join(p.split(' ', 1)[0] for p in problems[1:]) + ")"
                                   if len(problems) > 1 else ""))
    tf, tf_pin = versions.get("transformers"), pinned.get("transformers")
    if tf_pin and tf != tf_pin:
        if not allow_transformers_mismatch:
            had = (f"the carried wheel is {carried['transformers']}" if "transformers" in carried
                   else "no transformers wheel is carried in .whl/")
            return fail(f"transformers {tf} is installed but ppsd pins {tf_pin} and {had}; "
                        f"{FETCH}, or pass --allow-transformers-mismatch to run with {tf} anyway")
        # the flag is only safe when every call ppsd makes still means the same: a renamed layer
        # argument is swallowed by **kwargs (no error, no KV cache, wrong figures), so check them
        from runtime.llm import transformers_call_problems

        broken = transformers_call_problems()
        if broken:
            return fail(f"transformers {tf} (ppsd pins {tf_pin}) breaks a call ppsd makes: {broken[0]}"
                        + (f" (and {len(broken) - 1} more)" if len(broken) > 1 else "") + f"; {FETCH}")
        print(f"  note: running with transformers {tf}, not the pinned {tf_pin} (--allow-transformers-mismatch): "
              "the decoder-layer arguments, the init helper and a cached step checked out")
    import torch

    if not cpu and not torch.cuda.is_available():
        return fail(f"no CUDA GPU visible to torch {torch.__version__} (CUDA build: {torch.version.cuda}); "
                    "run this on a GPU machine, or pass --cpu-dry-run")
    if not cpu:
        n = torch.cuda.device_count()
        print(f"  CUDA {torch.version.cuda}, {n} GPU(s): {torch.cuda.get_device_name(0)}")
        if n >= 2 and not torch.distributed.is_nccl_available():
            print("  note: this torch has no NCCL: PPSD across GPUs cannot run (AR and EESD still will); "
                  "use a CUDA build of torch with NCCL")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="CPU dry run: torch need not see a GPU")
    ap.add_argument("--allow-transformers-mismatch", action="store_true")
    ap.add_argument("--wheels-needed", metavar="DIR", help="print the carried wheels this Python lacks, one a line")
    ap.add_argument("--wheels", metavar="DIR", help="the carried-wheel folder (default .whl)")
    ap.add_argument("--summary", metavar="FILE", help="on failure, write the reason there as JSON")
    args = ap.parse_args(argv)
    global SUMMARY
    SUMMARY = Path(args.summary) if args.summary else None
    if args.wheels_needed:
        for whl in wheels_needed(Path(args.wheels_needed)):
            print(whl)
        return 0
    return check(args.cpu, args.allow_transformers_mismatch, Path(args.wheels) if args.wheels else None)


if __name__ == "__main__":
    sys.exit(main())
