"""Write README screenshots of the dashboard to docs/ (PNG, at most 300 KB each) and their stamp.

    .venv/bin/python -m bench.screenshots [--out docs] [--pages overview planner ...]

Serves the app on a copy of the committed example profile and the validation folders measured from
it (`examples/`, nothing from runs/ or other profiles: the pictures show what a fresh clone opens on), opens each
page in headless Chromium (see dashboard/snapshots.py; `make browser-deps` installs it) and keeps
the pictures small enough to commit: if a PNG is over the limit it is re-encoded with a reduced
palette. Then writes `docs/screenshots.json` (STAMP_FILE): which profile the pictures show and
when it was measured (its profile.json `created`), which tests/test_readme_screenshots.py holds
against the committed profile — git keeps no file times, so the stamp is the pictures' date.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from dashboard import snapshots
from ppsd.paths import EXAMPLES_DIR

ROOT = Path(__file__).resolve().parent.parent

LIMIT = 300 * 1024
DEFAULT_PAGES = ["overview", "planner", "profile", "timeline", "validation"]
STAMP_FILE = "screenshots.json"
PROFILE = EXAMPLES_DIR / "smollm2-135m-cpu"  # the committed example profile the pictures show


def shrink(path: Path, limit: int = LIMIT) -> int:
    """Re-encode with an adaptive palette (screenshots are flat colours, so this loses little)."""
    from PIL import Image

    if path.stat().st_size <= limit:
        return path.stat().st_size
    for colours in (256, 128, 64):
        img = Image.open(path).convert("RGB").quantize(colors=colours, method=Image.Quantize.MEDIANCUT)
        img.save(path, optimize=True)
        if path.stat().st_size <= limit:
            break
    return path.stat().st_size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--pages", nargs="+", default=DEFAULT_PAGES, choices=list(snapshots.PAGE_URLS))
    args = ap.parse_args(argv)
    tmp = args.out / ".screenshots.partial"
    with tempfile.TemporaryDirectory(prefix="ppsd-shots-") as data, snapshots.serve(
            {"PPSD_DATA_DIRS": str(stage_examples(Path(data)))}) as url:
        # a cold server sweeps every exit head of the profile for the first page: give it time
        shots = snapshots.visit(url, args.pages, tmp, {"overview": 2, "planner": 3, "profile": 2, "timeline": 1,
                                                       "validation": 1}, timeout_s=600)
    bad = [s for s in shots if s.exceptions or s.errors]
    for s in shots:
        final = args.out / f"dashboard-{s.page}.png"
        s.screenshot.replace(final)
        print(f"{final}: {shrink(final) // 1024} KB, {s.charts} charts"
              + (f", PROBLEMS: {s.errors or 'exception'}" if s in bad else ""))
    tmp.rmdir()  # (screenshots moved out of it)
    if not bad:
        write_stamp(args.out, [s.page for s in shots])
    return 1 if bad else 0


def stage_examples(into: Path) -> Path:
    """A copy of examples/ holding only PROFILE and the validation folders of it (and no other
    profile, which the sidebar might open first; runs/ holds whatever this machine ran last, which
    a README must not show either): the pages open on what the stamp says they show."""
    from dashboard import data

    root = into / EXAMPLES_DIR.name
    shutil.copytree(PROFILE, root / PROFILE.name)
    for folder in data.find_validations([EXAMPLES_DIR]):
        if data.belongs_to(data.validation_info(folder), PROFILE, [EXAMPLES_DIR]):
            shutil.copytree(folder, root / folder.relative_to(EXAMPLES_DIR))
    return root


def stamp(pages: list[str]) -> dict:
    """What the pictures show: the profile (path under the project, its measured date and model)
    and the pages, with the time they were taken."""
    meta = json.loads((PROFILE / "profile.json").read_text())
    return {"profile": str(PROFILE.relative_to(ROOT)), "profile_created": meta.get("created"),
            "model": (meta.get("model") or {}).get("id"),
            "taken": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "pages": {p: f"dashboard-{p}.png" for p in pages}}


def write_stamp(out: Path, pages: list[str]) -> Path:
    """Merge these pages into the stamp (pages not retaken keep their entry only while the profile
    is the same one)."""
    path = out / STAMP_FILE
    new = stamp(pages)
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    if old.get("profile_created") == new["profile_created"]:
        new["pages"] = {**old.get("pages", {}), **new["pages"]}
    path.write_text(json.dumps(new, indent=2) + "\n")
    return path


if __name__ == "__main__":
    sys.exit(main())
