"""Finding and reading the folders the dashboard shows (no Streamlit here, so tests call it directly).

Sources are plain folders: profile folders (profile.json, written by `ppsd profile`) and
validation folders (validation.json, written by `ppsd validate`; batch_validation.json and
serve_validation.json, by its `--batch-sizes` and `--serve`). They are looked for under the
data roots: `$PPSD_DATA_DIRS` (os.pathsep-separated) when set, else `examples/` and `runs/`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ppsd import validation_folder as vf
from ppsd.errors import UserError
from ppsd.paths import EXAMPLES_DIR, PROJECT_ROOT, RUNS_DIR, cache_dir
from ppsd.profile import PROFILE_FILE
from sim.plan import Plan
from sim.timeline import Event

DATA_DIRS_ENV = "PPSD_DATA_DIRS"
# The profile the dashboard opens on, by its display name: the measured reference profile of the
# reference set (examples/README.md), never whichever folder happens to sort first.
REFERENCE_PROFILE = "examples/smollm2-135m-cpu"
# Deep enough for runs/<name>/<sub>/ but bounded, so a huge tree under runs/ cannot stall a page.
MAX_DEPTH = 4
MAX_ZIP_BYTES = 200 * 1024 * 1024


def data_roots() -> list[Path]:
    """Where profile and validation folders are looked for, in display order."""
    env = os.environ.get(DATA_DIRS_ENV)
    if env is not None:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]
    return [EXAMPLES_DIR, RUNS_DIR]


def runs_root() -> Path:
    """Where new profiles started from the dashboard are written: the last data root (runs/ by
    default), so they show up in the sidebar once done."""
    roots = data_roots()
    return roots[-1] if roots else RUNS_DIR


def _find(roots: list[Path], marker: str) -> list[Path]:
    found: list[Path] = []
    for root in roots:
        if not root.is_dir():
            continue
        base_depth = len(root.resolve().parts)
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            # skip hidden and half-written folders (atomic_dir writes `.name.partial`)
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            if len(here.resolve().parts) - base_depth >= MAX_DEPTH:
                dirnames[:] = []
            if marker in filenames:
                found.append(here)
    return found


def find_profiles(roots: list[Path] | None = None) -> list[Path]:
    return _find(data_roots() if roots is None else roots, PROFILE_FILE)


def find_validations(roots: list[Path] | None = None) -> list[Path]:
    return _find(data_roots() if roots is None else roots, vf.JSON_FILE)


def find_batch_validations(roots: list[Path] | None = None) -> list[Path]:
    """Folders written by `ppsd validate --batch-sizes` (batch_validation.json)."""
    return _find(data_roots() if roots is None else roots, vf.BATCH_JSON_FILE)


def find_serve_validations(roots: list[Path] | None = None) -> list[Path]:
    """Folders written by `ppsd validate --serve` (serve_validation.json), shown on the Under traffic page."""
    return _find(data_roots() if roots is None else roots, vf.SERVE_JSON_FILE)


def display_name(path: Path, roots: list[Path] | None = None) -> str:
    """`examples/smollm2-135m-cpu` style label: the path relative to its root's parent."""
    for root in data_roots() if roots is None else roots:
        try:
            return str(path.resolve().relative_to(root.resolve().parent))
        except ValueError:
            continue
    return str(path)


def relative_paths(text: str, roots: list[Path] | None = None) -> str:
    """`text` (an error's one line) with every folder under a data root or the project named as the sidebar
    names it (`examples/NAME`), so a page shows no machine's absolute paths."""
    bases = {str(r.resolve().parent) for r in (data_roots() if roots is None else roots)} | {str(PROJECT_ROOT)}
    for base in sorted(bases, key=len, reverse=True):
        text = text.replace(base.rstrip(os.sep) + os.sep, "")
    return text


def reference_first(labels: list[str]) -> list[str]:
    """The profile picker's order: REFERENCE_PROFILE first, then the rest as found (examples/, then runs/)."""
    return sorted(labels, key=lambda label: label != REFERENCE_PROFILE)


def default_profile(labels: list[str]) -> str | None:
    """The label the dashboard opens on: REFERENCE_PROFILE when it is listed, else the first one."""
    if REFERENCE_PROFILE in labels:
        return REFERENCE_PROFILE
    return labels[0] if labels else None


def acceptance_only(meta: dict) -> bool:
    """Whether a profile folder holds acceptance traces only (`ppsd profile --skip-latency`: its latency is a
    quick n = 1 measurement, `timing.quick`): a source for *Acceptance from*, never a profile to plan on."""
    return bool((meta.get("timing") or {}).get("quick"))


def plannable(sources: dict[str, str], metas: dict[str, dict | None]) -> dict[str, str]:
    """The sources ({label: path}) a user may plan on: every one but the acceptance-only folders (their
    profile.json content in `metas`, by path; a folder without one is kept, its load then says what is wrong)."""
    return {label: p for label, p in sources.items() if not acceptance_only(metas.get(p) or {})}


def source_summary(meta: dict) -> dict[str, str]:
    """The facts every page header shows about a profile: model, device, date, versions."""
    model = meta.get("model") or {}
    hw = meta.get("hardware") or {}
    versions = meta.get("versions") or {}
    device = hw.get("device_name") or hw.get("device") or "?"
    if hw.get("threads"):
        device += f" ({hw['threads']} thread{'s' if hw['threads'] != 1 else ''})"
    return {
        "model": f"{model.get('id', '?')} ({model.get('num_layers', '?')} layers, {model.get('dtype', '?')})",
        "device": device,
        "date": str(meta.get("created", "?"))[:19].replace("T", " "),
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items() if v),
        "kind": meta.get("kind", "measured"),
    }


# --- uploads ------------------------------------------------------------------------------
def extract_profile_zip(data: bytes, name: str = "upload.zip", into: Path | None = None) -> Path:
    """Unpack an uploaded zip of a profile folder into the cache and return the folder that holds
    profile.json. Content-addressed, so uploading the same zip twice reuses one folder."""
    if len(data) > MAX_ZIP_BYTES:
        raise UserError(f"{name} is larger than {MAX_ZIP_BYTES >> 20} MB", "zip only the profile folder")
    digest = hashlib.sha256(data).hexdigest()[:16]
    dest = (into or cache_dir() / "uploads") / digest
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise UserError(f"{name} is not a zip file", "upload a .zip of a folder written by `ppsd profile`") from None
    with zf:
        members = zf.infolist()
        total = sum(m.file_size for m in members)
        if total > 4 * MAX_ZIP_BYTES:
            raise UserError(f"{name} unpacks to {total >> 20} MB", "zip only the profile folder")
        # refuse absolute paths and `..` (a zip may name any path; keep it inside dest)
        for m in members:
            parts = Path(m.filename).parts
            if m.filename.startswith(("/", "\\")) or ".." in parts:
                raise UserError(f"{name} contains the unsafe path {m.filename!r}", "zip the folder with relative paths")
        if not dest.exists():
            tmp = dest.with_name(dest.name + ".partial")
            tmp.mkdir(parents=True, exist_ok=True)
            zf.extractall(tmp)
            os.replace(tmp, dest)
    found = sorted(_find([dest], PROFILE_FILE), key=lambda p: len(p.parts))
    if not found:
        raise UserError(f"{name} holds no {PROFILE_FILE}", "zip a folder written by `ppsd profile --out DIR`")
    return found[0]


# --- validation folders (the format is ppsd/validation_folder.py) -------------------------------
@dataclass
class Validation:
    path: Path
    meta: dict
    rows: pd.DataFrame

    @property
    def label(self) -> str:
        return f"{self.meta.get('model', '?')} on {self.meta.get('device_name', '?')} ({str(self.meta.get('created', ''))[:10]})"

    def timeline_files(self) -> dict[str, dict[str, Path]]:
        """{slug: {"measured": path, "simulated": path}} for the traces the runtime recorded."""
        return vf.timeline_files(self.path)

    def timelines_for(self, plan: Plan) -> dict[str, Path]:
        """{"measured": path, "simulated": path} recorded for this plan (any exit head), {} if none."""
        return vf.plan_timelines(self.path, plan)


def load_validation(path: Path) -> Validation:
    doc = vf.read_doc(path)
    return Validation(Path(path), doc, pd.DataFrame(vf.read_rows(path, doc)))


@dataclass(frozen=True)
class ValidationInfo:
    """What the Validation page's picker needs of a folder, read from its validation.json alone."""

    path: Path
    profile: str | None  # the profile it validated, as `ppsd validate --profile` was given it
    created: str         # ISO time ("" when unknown)
    emulated: bool       # `ppsd validate --emulate`: devices emulated from the profile, not real decoding
    sampled: bool = False        # `ppsd validate --temperature T` (T > 0): sampled decoding, not greedy
    out_of_sample: bool = False  # the measured prompts were none of the predicting ones


def validation_info(path: Path) -> ValidationInfo:
    """The picker's facts of one folder; a folder whose validation.json cannot be read gets empty ones
    (the page shows the one-line error when it is picked)."""
    try:
        doc = json.loads((Path(path) / vf.JSON_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    try:
        sampled = float(doc.get("temperature") or 0.0) > 0
    except (TypeError, ValueError):
        sampled = False
    return ValidationInfo(Path(path), doc.get("profile"), str(doc.get("created") or ""), bool(doc.get("emulated")),
                          sampled, bool(doc.get("out_of_sample")))


def belongs_to(info: ValidationInfo, profile_path: str | Path | None, roots: list[Path] | None = None) -> bool:
    """Whether a validation ran on this profile folder: its recorded `profile` names the same folder
    (relative to the project root, where `ppsd validate` usually runs, or absolute) or the folder's
    display name."""
    if not info.profile or profile_path is None:
        return False
    want = Path(profile_path).resolve()
    named = Path(info.profile).expanduser()
    candidates = [named] if named.is_absolute() else [PROJECT_ROOT / named, *((r.parent / named) for r in
                                                                            (roots or data_roots()))]
    return any(c.resolve() == want for c in candidates) or info.profile == display_name(want, roots)


def validation_order(folders: list[Path], profile_path: str | Path | None,
                     profile_created: str | None = None, roots: list[Path] | None = None) -> list[ValidationInfo]:
    """The picker's order: the selected profile's real (not emulated) greedy validations first, those made
    from this version of it (created after the profile) before older ones, out of sample before in sample,
    newest first; then its sampled ones (T > 0), then its emulated runs; then everything else in the same
    order. The page opens on the first: what the profile's greedy predictions measured on real hardware, on
    prompts they were not made from, whenever there is such a run (the validation the README quotes)."""
    def key(info: ValidationInfo):
        mine = belongs_to(info, profile_path, roots)
        current = bool(profile_created) and info.created >= str(profile_created)
        # newest first inside each group: negate the ISO time character by character
        return (not mine, info.emulated, info.sampled, not current, not info.out_of_sample,
                [-ord(c) for c in info.created])

    return sorted((validation_info(p) for p in folders), key=key)


def validation_label(info: ValidationInfo, roots: list[Path] | None = None) -> str:
    """The picker's label: the folder's display name, "· emulated" for emulated runs."""
    return display_name(info.path, roots) + (" · emulated (not real decoding)" if info.emulated else "")


def default_recording(names: list[str], plan: Plan) -> int:
    """Index of the recording to show beside a simulated plan: that plan's own (its exit head
    included, as `ppsd validate` names them), else the first pipeline run, else the first."""
    slug = vf.timeline_slug(plan)
    same = [i for i, n in enumerate(names) if n.endswith(f": {slug}")]
    pipes = [i for i, n in enumerate(names) if ": ppsd-" in n]
    return (same or pipes or [0])[0]


def events_from_chrome_trace(trace: dict) -> list[Event]:
    """The inverse of sim.timeline.to_chrome_trace for complete ("X") events; row names come from the
    thread_name metadata, times back to seconds."""
    names: dict[tuple, str] = {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e.get("pid"), e.get("tid"))] = (e.get("args") or {}).get("name", str(e.get("tid")))
    events = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        args = dict(e.get("args") or {})
        token = args.pop("token", None)
        events.append(Event(name=e.get("name", "?"), row=names.get((e.get("pid"), e.get("tid")), str(e.get("tid"))),
                            start_s=float(e.get("ts", 0)) / 1e6, dur_s=float(e.get("dur", 0)) / 1e6,
                            token=token, args=args))
    return events


def read_chrome_trace(path: Path) -> list[Event]:
    try:
        return events_from_chrome_trace(json.loads(Path(path).read_text()))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError) as exc:
        raise UserError(f"cannot read the trace {path} ({exc.__class__.__name__})", "re-run `ppsd validate`") from None
