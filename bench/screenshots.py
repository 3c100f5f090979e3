"""Write README screenshots of the dashboard to docs/ (PNG, at most 300 KB each).

    .venv/bin/python bench/screenshots.py [--out docs] [--pages overview planner ...]

Serves the app on the committed example profile (plus any validation folder under runs/; the
committed pictures used `ppsd validate --profile examples/smollm2-135m-cpu --plans
'eesd:24:2;ppsd:24:2;ppsd:15:2' --limit 2 --repeats 1 --out runs/validation-smollm2-example`), opens
each page in headless Chromium (see dashboard/snapshots.py) and keeps the pictures small enough
to commit: if a PNG is over the limit it is re-encoded with a reduced palette.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dashboard import snapshots  # noqa: E402
from ppsd.paths import EXAMPLES_DIR, RUNS_DIR  # noqa: E402

LIMIT = 300 * 1024
DEFAULT_PAGES = ["overview", "planner", "profile", "timeline", "validation"]


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
    env = {"PPSD_DATA_DIRS": os.pathsep.join([str(EXAMPLES_DIR), str(RUNS_DIR)])}
    tmp = args.out / ".screenshots.partial"
    with snapshots.serve(env) as url:
        shots = snapshots.visit(url, args.pages, tmp, {"overview": 1, "planner": 2, "profile": 2, "timeline": 1,
                                                       "validation": 1})
    bad = [s for s in shots if s.exceptions or s.errors]
    for s in shots:
        final = args.out / f"dashboard-{s.page}.png"
        s.screenshot.replace(final)
        print(f"{final}: {shrink(final) // 1024} KB, {s.charts} charts"
              + (f", PROBLEMS: {s.errors or 'exception'}" if s in bad else ""))
    tmp.rmdir()  # (screenshots moved out of it)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
