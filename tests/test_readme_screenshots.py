"""The README's dashboard pictures are of the example profile as it is committed now: bench/screenshots.py
records which profile they show and when it was measured (docs/screenshots.json; git keeps no file
times), and this fails once the example profile (or, for a page shown on another committed profile, that one) is
re-measured without new pictures."""

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
    # a page shown on another committed profile (Under traffic: the batch profile) is held to that one's date
    for page, shown in (stamp.get("page_profiles") or {}).items():
        created = json.loads((PROJECT_ROOT / shown["profile"] / "profile.json").read_text())["created"]
        assert shown["profile_created"] == created, (
            f"docs/dashboard-{page}.png shows {shown['profile']} as measured {shown['profile_created']}, but the "
            f"committed profile was measured {created}: regenerate it with `.venv/bin/python -m bench.screenshots "
            f"--pages {page}`")
    for name in pictures:
        assert (DOCS / name).stat().st_size > 10_000, f"docs/{name} is empty or tiny"


def test_the_pictures_stage_the_traffic_pages_profile_and_its_serving_validations_only(tmp_path, monkeypatch):
    from bench import screenshots
    from dashboard_fixtures import make_serve_validation, make_synthetic
    from serve_fixtures import write_serving_profile

    examples = tmp_path / "examples"
    reference, serving = make_synthetic(examples, "reference"), examples / "serving"
    write_serving_profile(serving)
    write_serving_profile(examples / "other-serving")
    make_serve_validation(examples, serving, "serving-checked", policies="ar;eesd:2:3", requests=4, replications=1)
    make_serve_validation(examples, examples / "other-serving", "other-checked", policies="ar", requests=4,
                          replications=1)
    monkeypatch.setattr(screenshots, "EXAMPLES_DIR", examples)
    monkeypatch.setattr(screenshots, "PROFILE", reference)
    monkeypatch.setattr(screenshots, "PAGE_PROFILES", {"traffic": serving})
    staged = screenshots.stage_examples(tmp_path / "staged")
    assert sorted(p.name for p in staged.iterdir()) == ["reference", "serving", "serving-checked"]
    assert screenshots.visit_of("overview").query == "" and screenshots.MIN_CHARTS["traffic"] >= 1
