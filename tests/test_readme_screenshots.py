"""The README's dashboard pictures are of the example profile as it is committed now: bench/screenshots.py
records which profile they show and when it was measured (docs/screenshots.json; git keeps no file
times), and this fails once the example profile is re-measured without new pictures."""

from __future__ import annotations

import json
import re

from dashboard_fixtures import EXAMPLE
from ppsd.paths import PROJECT_ROOT

DOCS = PROJECT_ROOT / "docs"
STAMP = DOCS / "screenshots.json"


def _readme_pictures() -> set[str]:
    text = (PROJECT_ROOT / "README.md").read_text()
    return set(re.findall(r"docs/(dashboard-[\w-]+\.png)", text))


def test_readme_pictures_are_not_older_than_the_example_profile():
    pictures = _readme_pictures()
    assert pictures, "the README shows no dashboard pictures"
    assert STAMP.exists(), "docs/screenshots.json is missing: run `.venv/bin/python -m bench.screenshots`"
    stamp = json.loads(STAMP.read_text())
    measured = json.loads((EXAMPLE / "profile.json").read_text())["created"]
    assert stamp["profile"] == str(EXAMPLE.relative_to(PROJECT_ROOT)), stamp["profile"]
    assert stamp["profile_created"] == measured, (
        f"the README's screenshots show {stamp['profile']} as measured {stamp['profile_created']}, but the "
        f"committed profile was measured {measured}: regenerate them with `.venv/bin/python -m bench.screenshots`")
    taken = set(stamp["pages"].values())
    assert pictures <= taken, f"README pictures not taken by bench/screenshots.py: {sorted(pictures - taken)}"
    for name in pictures:
        assert (DOCS / name).stat().st_size > 10_000, f"docs/{name} is empty or tiny"
