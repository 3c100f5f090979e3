"""Write README screenshots of the dashboard to docs/ (PNG, at most 300 KB each) and their stamp.

    .venv/bin/python -m bench.screenshots [--out docs] [--pages overview planner ...]

Serves the app on a copy of the committed example profile and the validation folders measured from
it (`examples/`, nothing from runs/ or other profiles: the pictures show what a fresh clone opens on; a page the
example profile cannot fill, Under traffic, which needs batch tables, shows the committed batch profile and its
serving validations, `PAGE_PROFILES`), opens each page in headless Chromium (see dashboard/snapshots.py; `make browser-deps` installs it) and keeps
the pictures small enough to commit: if a PNG is over the limit it is re-encoded with a reduced
palette. Then writes `docs/screenshots.json` (STAMP_FILE): which profile the pictures show and
when it was measured (its profile.json `created`; `page_profiles` the same for the pages of `PAGE_PROFILES`),
which tests/test_readme_screenshots.py holds against the committed profiles — git keeps no file times, so the
stamp is the pictures' date.
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
DEFAULT_PAGES = ["overview", "planner", "profile", "timeline", "validation", "traffic"]
STAMP_FILE = "screenshots.json"
PROFILE = EXAMPLES_DIR / "smollm2-135m-cpu"  # the committed example profile the pictures show
# pages shown on another committed profile: Under traffic needs batch tables, which PROFILE lacks
PAGE_PROFILES = {"traffic": EXAMPLES_DIR / "smollm2-135m-batch-amd-epyc" / "profile"}
MIN_CHARTS = {"overview": 2, "planner": 3, "profile": 2, "timeline": 1, "validation": 1, "traffic": 1}


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
        shots = snapshots.visit(url, [visit_of(p) for p in args.pages], tmp, timeout_s=600)
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


def visit_of(page: str) -> snapshots.Visit:
    """A page at the pictures' size, on its profile (`PAGE_PROFILES`, else the one the sidebar opens on)."""
    other = PAGE_PROFILES.get(page)
    query = f"profile={other.relative_to(ROOT)}" if other is not None else ""
    return snapshots.Visit(page, 1400, 1000, query=query, min_charts=MIN_CHARTS.get(page, 0))


def stage_examples(into: Path) -> Path:
    """A copy of examples/ holding only PROFILE and the validation folders of it, and the profiles of
    `PAGE_PROFILES` with their serving validations (and no other profile; runs/ holds whatever this machine ran
    last, which a README must not show either): the pages open on what the stamp says they show (the sidebar opens
    on PROFILE, `data.REFERENCE_PROFILE`)."""
    from dashboard import data
    from dashboard import serve_validation as sv

    root = into / EXAMPLES_DIR.name
    shutil.copytree(PROFILE, root / PROFILE.name)
    for folder in data.find_validations([EXAMPLES_DIR]):
        if data.belongs_to(data.validation_info(folder), PROFILE, [EXAMPLES_DIR]):
            shutil.copytree(folder, root / folder.relative_to(EXAMPLES_DIR))
    for other in set(PAGE_PROFILES.values()):
        shutil.copytree(other, root / other.relative_to(EXAMPLES_DIR))
        for folder, mine in sv.order(data.find_serve_validations([EXAMPLES_DIR]), str(other), None, [EXAMPLES_DIR]):
            if mine and not (root / folder.relative_to(EXAMPLES_DIR)).exists():
                shutil.copytree(folder, root / folder.relative_to(EXAMPLES_DIR))
    return root


def stamp(pages: list[str]) -> dict:
    """What the pictures show: the profile (path under the project, its measured date and model),
    the pages, with the time they were taken, and the profile of each page shown on another one."""
    meta = json.loads((PROFILE / "profile.json").read_text())
    return {"profile": str(PROFILE.relative_to(ROOT)), "profile_created": meta.get("created"),
            "model": (meta.get("model") or {}).get("id"),
            "taken": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "pages": {p: f"dashboard-{p}.png" for p in pages},
            "page_profiles": {p: {"profile": str(PAGE_PROFILES[p].relative_to(ROOT)),
                                  "profile_created": _created(PAGE_PROFILES[p])} for p in pages if p in PAGE_PROFILES}}


def _created(profile: Path) -> str | None:
    return json.loads((profile / "profile.json").read_text()).get("created")


def write_stamp(out: Path, pages: list[str]) -> Path:
    """Merge these pages into the stamp (pages not retaken keep their entry only while the profile
    is the same one; a page of `PAGE_PROFILES` keeps its own profile's date in `page_profiles`)."""
    path = out / STAMP_FILE
    new = stamp(pages)
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    if old.get("profile_created") == new["profile_created"]:
        new["pages"] = {**old.get("pages", {}), **new["pages"]}
        new["page_profiles"] = {**old.get("page_profiles", {}), **new["page_profiles"]}
    path.write_text(json.dumps(new, indent=2) + "\n")
    return path


if __name__ == "__main__":
    sys.exit(main())
