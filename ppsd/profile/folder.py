"""Reading and writing a profile folder: `load_profile` validates one (a one-line UserError on any
problem), `save_profile` writes one atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ppsd.errors import UserError
from ppsd.paths import atomic_write_json, atomic_write_text
import ppsd.profile.schema as schema
from ppsd.profile.files import (ACCEPTANCE_FILE, GENERATIONS_FILE, PROFILE_FILE, READABLE_VERSIONS,
                                SAMPLED_BETA_DECIMALS, SAMPLED_COLUMNS, SAMPLED_CONFIDENCE_DECIMALS, SAMPLED_FILE,
                                SAMPLED_OPTIONAL, SCHEMA_VERSION, acceptance_columns, malformed)
from ppsd.profile.profile import Profile
from ppsd.profile.schema import ProfileDoc
from ppsd.profile.tables import StatTable


def read_meta(path: Path) -> dict:
    """A profile folder's profile.json as a dict of a readable schema version (UserError otherwise)."""
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
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise UserError(f"profile {path} has schema_version {version!r}, this ppsd reads "
                        f"{', '.join(map(str, READABLE_VERSIONS[:-1]))} or {READABLE_VERSIONS[-1]}",
                        "re-create it with this ppsd's `ppsd profile`")
    return meta


def validated(path: Path, meta: dict) -> ProfileDoc:
    """`meta` (upgraded) checked against the schema; a one-line UserError naming the first broken field."""
    try:
        return schema.validate_meta(meta)
    except schema.FieldError as err:
        raise UserError(f"profile {path} is malformed: {err}", schema.fix_for(err)) from None


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile folder (or its profile.json); raise UserError on any problem. An older
    schema version is upgraded in memory (`schema.upgrade`)."""
    path = Path(path)
    if path.is_file() and path.name == PROFILE_FILE:
        path = path.parent
    meta = schema.upgrade(read_meta(path))
    doc = validated(path, meta)
    lat = doc.latency
    profile = Profile(path=path, meta=meta, doc=doc, layers=StatTable.from_block(lat.layers),
                      embedding=StatTable.from_block(lat.embedding), head=StatTable.from_block(lat.head),
                      n_values=np.asarray(lat.n_values, dtype=float),
                      context_values=np.asarray(lat.context_values, dtype=float))
    _check_files(profile)
    return profile


def _check_files(profile: Profile) -> None:
    """Every file the profile names exists inside the folder that holds it: this one, or the profile
    folder `acceptance.dir` names (a view); no '..', no absolute name, no symlink out of it."""
    acc = profile.doc.acceptance
    if not profile.meta.get("acceptance"):  # null or {}: no traces
        return
    where = profile.acceptance_dir
    if acc.dir and not (where / PROFILE_FILE).is_file():
        raise malformed(profile.path, f"acceptance.dir {acc.dir!r} is not a profile folder (no {PROFILE_FILE})")
    files = [("acceptance.file", acc.file, True), ("acceptance.generations_file", acc.generations_file, False)]
    if acc.sampled:
        files.append(("acceptance.sampled.file", acc.sampled.file, True))
    root = where.resolve()
    for field_name, name, required in files:
        file = where / name
        if (file.exists() or file.is_symlink()) and not file.resolve().is_relative_to(root):
            raise malformed(profile.path, f"{field_name} {name!r} leads out of {where} (a symlink)")
        if required and not file.is_file():
            raise malformed(profile.path, f"{field_name} names {name} in {where} but the file is missing")


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
    """Write `block` into a measured profile as `latency.<name>` (profile.json rewritten atomically, after
    the schema checks it) and read the folder back, so a block added later (`ppsd profile add-sampling`,
    `add-batch`) never leaves a folder that does not load. Returns profile.json's path."""
    path = Path(folder) / PROFILE_FILE
    meta = read_meta(Path(folder))
    meta["latency"][name] = block
    validated(Path(folder), schema.upgrade(meta))  # a block that breaks the schema is refused before writing
    atomic_write_json(path, meta)
    load_profile(folder)
    return path
