"""Reading and writing a profile folder: `load_profile` validates one (a one-line UserError on any
problem), `save_profile` writes one atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ppsd.errors import UserError
from ppsd.paths import atomic_write_json, atomic_write_text
from ppsd.profile.files import (ACCEPTANCE_FILE, GENERATIONS_FILE, PROFILE_FILE, READABLE_VERSIONS,
                                SAMPLED_BETA_DECIMALS, SAMPLED_COLUMNS, SAMPLED_CONFIDENCE_DECIMALS, SAMPLED_FILE,
                                SAMPLED_OPTIONAL, SCHEMA_VERSION, acceptance_columns, malformed)
from ppsd.profile.profile import Profile
from ppsd.profile.tables import StatTable


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile folder (or its profile.json); raise UserError on any problem."""
    path = Path(path)
    if path.is_file() and path.name == PROFILE_FILE:
        path = path.parent
    file = path / PROFILE_FILE
    if not path.exists():
        raise UserError(f"profile folder {path} does not exist", "give a folder written by `ppsd profile --out DIR`")
    if not file.exists():
        raise UserError(f"{path} is not a profile folder (no {PROFILE_FILE})",
                        "give a folder written by `ppsd profile --out DIR`")
    try:
        meta = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise malformed(path, f"{PROFILE_FILE} is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(meta, dict):
        raise malformed(path, f"{PROFILE_FILE} is not a JSON object")
    version = meta.get("schema_version")
    if version is None:
        raise UserError(f"profile {path} has no schema_version",
                        f"re-create it with this ppsd's `ppsd profile` (schema {SCHEMA_VERSION})")
    if version not in READABLE_VERSIONS:
        raise UserError(f"profile {path} has schema_version {version!r}, this ppsd reads "
                        f"{' or '.join(map(str, READABLE_VERSIONS))}",
                        "re-create it with this ppsd's `ppsd profile`")
    try:
        model = meta["model"]
        num_layers = int(model["num_layers"])
        lat = meta["latency"]
        n_values = np.asarray(lat["n_values"], dtype=float)
        ctx_values = np.asarray(lat["context_values"], dtype=float)
        meta["hardware"]
    except (KeyError, TypeError, ValueError) as exc:
        raise malformed(path, f"missing or invalid field {exc}") from None
    if num_layers < 2:
        raise malformed(path, f"num_layers is {num_layers}; early exit needs at least 2 layers")
    for name, grid in (("n_values", n_values), ("context_values", ctx_values)):
        if grid.ndim != 1 or len(grid) == 0 or np.any(np.diff(grid) <= 0):
            raise malformed(path, f"latency.{name} must be a non-empty increasing list")
    shape3 = (num_layers, len(n_values), len(ctx_values))
    shape1 = (len(n_values),)
    for key in ("layers", "embedding", "head"):
        if key not in lat:
            raise malformed(path, f"latency.{key} is missing")
    profile = Profile(
        path=path,
        meta=meta,
        layers=StatTable.from_json(lat["layers"], shape3, path, "layers"),
        embedding=StatTable.from_json(lat["embedding"], shape1, path, "embedding"),
        head=StatTable.from_json(lat["head"], shape1, path, "head"),
        n_values=n_values,
        context_values=ctx_values,
    )
    _load_parallel_tables(lat, shape3, shape1, path)
    acc = meta.get("acceptance")
    if acc and not (profile.acceptance_dir / acc.get("file", ACCEPTANCE_FILE)).exists():
        raise malformed(path, f"profile.json names {acc.get('file')} in {profile.acceptance_dir} but the file is missing")
    sampled = (acc or {}).get("sampled")
    if sampled:
        temps = sampled.get("temperatures")
        if not isinstance(temps, list) or not temps or not all(
                isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in temps):
            raise malformed(path, "acceptance.sampled.temperatures must be a non-empty list of temperatures > 0")
        if not (profile.acceptance_dir / sampled.get("file", SAMPLED_FILE)).exists():
            raise malformed(path, f"profile.json names {sampled.get('file', SAMPLED_FILE)} but the file is missing")
    return profile


def _load_parallel_tables(lat: dict, shape3, shape1, path: Path) -> None:
    """Validate `latency.parallel` and turn its tables into StatTables in place (the raw dict
    keeps them as objects, so `Profile.at_parallel` needs no second parse)."""
    par = lat.get("parallel")
    if not par:
        return
    if par.get("kind") not in ("threads", "tensor_parallel") or not isinstance(par.get("tables"), dict):
        raise malformed(path, "latency.parallel needs kind (threads | tensor_parallel) and tables")
    parsed = {}
    for units, t in par["tables"].items():
        if not str(units).isdigit() or int(units) < 1:
            raise malformed(path, f"latency.parallel.tables has a bad budget {units!r}")
        parsed[str(int(units))] = {
            "layers": StatTable.from_json(t["layers"], shape3, path, f"parallel.{units}.layers"),
            "embedding": StatTable.from_json(t["embedding"], shape1, path, f"parallel.{units}.embedding"),
            "head": StatTable.from_json(t["head"], shape1, path, f"parallel.{units}.head"),
            "whole_step_ms": t.get("whole_step_ms"),
            "speedup_vs_base": t.get("speedup_vs_base"),
            "speedup_cv": t.get("speedup_cv"),
        }
    lat["parallel"] = {**par, "tables": parsed}


def save_profile(out_dir: str | Path, meta: dict, acceptance=None, generations: list[dict] | None = None,
                 sampled=None) -> Path:
    """Write a profile folder's files atomically (each file via temp + rename). `meta` must follow
    the schema above; `acceptance` is a DataFrame with ACCEPTANCE_COLUMNS; `sampled` one with
    SAMPLED_COLUMNS (beta along sampled trajectories; meta's `acceptance.sampled` gets its file and
    temperatures)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(meta)
    meta["schema_version"] = SCHEMA_VERSION
    if acceptance is not None:
        import io
        import gzip

        df = acceptance[acceptance_columns(acceptance)]
        buf = io.StringIO()
        df.to_csv(buf, index=False, float_format="%.4g")
        data = gzip.compress(buf.getvalue().encode(), mtime=0)
        from ppsd.paths import atomic_write_bytes

        atomic_write_bytes(out / ACCEPTANCE_FILE, data)
        meta.setdefault("acceptance", {})
        meta["acceptance"] = {**(meta["acceptance"] or {}), "file": ACCEPTANCE_FILE}
    if sampled is not None:
        import gzip
        import io

        from ppsd.paths import atomic_write_bytes

        buf = io.StringIO()
        columns = SAMPLED_COLUMNS + [c for c in SAMPLED_OPTIONAL if c in sampled.columns]
        # beta to SAMPLED_BETA_DECIMALS: 44 prompts x 3 trajectories x 2 temperatures at 4 significant
        # digits made a 2.5 MB file; 3 decimals move any exit's mean beta by < 3e-5
        sampled = sampled.assign(beta=sampled["beta"].astype(float).round(SAMPLED_BETA_DECIMALS))
        if "confidence" in sampled.columns:
            sampled = sampled.assign(confidence=sampled["confidence"].astype(float).round(SAMPLED_CONFIDENCE_DECIMALS))
        sampled[columns].to_csv(buf, index=False, float_format="%.6g")
        atomic_write_bytes(out / SAMPLED_FILE, gzip.compress(buf.getvalue().encode(), mtime=0))
        acc = dict(meta.get("acceptance") or {})
        temps = sorted({round(float(t), 6) for t in sampled["temperature"].unique()})
        acc["sampled"] = {**(acc.get("sampled") or {}), "file": SAMPLED_FILE, "temperatures": temps}
        meta["acceptance"] = acc
    if generations is not None:
        atomic_write_text(out / GENERATIONS_FILE, "".join(json.dumps(g) + "\n" for g in generations))
        meta["acceptance"] = {**(meta.get("acceptance") or {}), "generations_file": GENERATIONS_FILE}
    atomic_write_json(out / PROFILE_FILE, _jsonable(meta))
    return out


def write_acceptance_view(base: str | Path, acceptance: str | Path, out_dir: str | Path) -> Profile:
    """A profile folder at `out_dir` holding `base`'s profile.json with `acceptance`'s acceptance block
    (`acceptance.dir` names where its files are: nothing is copied), checked as
    `Profile.with_acceptance_from` checks it (UserError before anything is written); returns it loaded.
    The dashboard prices a profile for another profile's prompts through such a folder."""
    view = load_profile(base).with_acceptance_from(load_profile(acceptance))  # checked before writing
    meta = json.loads((Path(base) / PROFILE_FILE).read_text())
    meta["acceptance"] = view.meta["acceptance"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / PROFILE_FILE, meta)
    return load_profile(out)


def _jsonable(obj):
    if isinstance(obj, StatTable):
        return obj.to_json()
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def add_latency_block(folder: str | Path, name: str, block: dict) -> Path:
    """Write `block` into a measured profile as `latency.<name>` (profile.json rewritten atomically) and
    read the folder back, so a block added later (`ppsd profile add-sampling`, `add-batch`) never leaves a
    folder that does not load. Returns profile.json's path."""
    path = Path(folder) / PROFILE_FILE
    meta = json.loads(path.read_text())
    meta["latency"][name] = block
    atomic_write_json(path, meta)
    load_profile(folder)
    return path
