"""examples/ is the reference set: one folder per question, each a row of examples/README.md's index with its
note; every validation names, by a path that resolves in any checkout, the profile folder it was measured
against, committed here and not re-measured since; the whole set stays small enough to clone. The dashboard
opens on the measured reference profile by name (dashboard/data.py: REFERENCE_PROFILE)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from dashboard import data
from ppsd.paths import EXAMPLES_DIR, PROJECT_ROOT

INDEX = EXAMPLES_DIR / "README.md"
# an index row starts with a link to its folder: | [name/](name/) | question | headline | [note](name/NOTE.md) |
ROW = re.compile(r"^\| \[([^\]/]+)/\]\(\1/\) \|(.*)\|\s*$", re.M)
NOTES = ("NOTE.md", "README.md")
POINTERS = ("profile", "predicted_from", "measured_traces")  # the validation.json keys that name a profile folder
MAX_TOTAL_BYTES = 15 * 2**20
MAX_FILE_BYTES = 2 * 2**20


def _index_rows() -> dict[str, str]:
    return {m.group(1): m.group(2) for m in ROW.finditer(INDEX.read_text())}


def test_the_index_lists_every_folder_and_every_folder_it_lists_exists():
    rows = _index_rows()
    assert rows, f"{INDEX} has no index rows (| [name/](name/) | ... |)"
    folders = {p.name for p in EXAMPLES_DIR.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert sorted(set(rows) - folders) == [], "examples/README.md lists folders that are not there"
    assert sorted(folders - set(rows)) == [], "folders under examples/ without a row in examples/README.md"
    for name, rest in rows.items():
        assert any((EXAMPLES_DIR / name / n).is_file() for n in NOTES), f"examples/{name}/ has no NOTE.md or README.md"
        notes = re.findall(r"\]\(([^)\s]+\.md)\)", rest)
        assert notes, f"the row of {name}/ links no note"
        for note in notes:
            assert (EXAMPLES_DIR / note).is_file(), f"the row of {name}/ links {note}, which is not there"


def _profile_folder(value: str, file: Path) -> Path | None:
    """The profile folder a validation.json path names: relative to the project root (where `ppsd validate`
    runs) or to the file's folder."""
    named = Path(value)
    for candidate in (PROJECT_ROOT / named, file.parent / named):
        if (candidate / "profile.json").is_file():
            return candidate
    return None


def test_every_validation_names_a_committed_profile_it_was_measured_against():
    files = sorted(EXAMPLES_DIR.rglob("validation.json"))
    assert files
    problems = []
    for file in files:
        doc = json.loads(file.read_text())
        where = file.relative_to(PROJECT_ROOT)
        for key in POINTERS:
            value = doc.get(key)
            if not isinstance(value, str) or "/" not in value:  # absent, or names no path ("analytic, cpu")
                continue
            if Path(value).is_absolute():
                problems.append(f"{where}: {key} {value!r} is absolute (name the folder under examples/)")
                continue
            folder = _profile_folder(value, file)
            if folder is None:
                problems.append(f"{where}: {key} {value!r} is no profile folder")
                continue
            profiled = json.loads((folder / "profile.json").read_text()).get("created", "")
            if doc.get("created") and profiled and profiled > doc["created"]:
                problems.append(f"{where}: {key} {value!r} was measured again ({profiled}) after this validation "
                                f"({doc['created']}); it cannot stand as a reference")
    assert not problems, "\n".join(problems)


def test_examples_stay_small():
    files = [p for p in EXAMPLES_DIR.rglob("*") if p.is_file()]
    big = [f"{p.relative_to(PROJECT_ROOT)} ({p.stat().st_size >> 10} KiB)" for p in files
           if p.stat().st_size > MAX_FILE_BYTES]
    assert not big, f"files over {MAX_FILE_BYTES >> 20} MiB under examples/: {big}"
    total = sum(p.stat().st_size for p in files)
    assert total <= MAX_TOTAL_BYTES, (f"examples/ holds {total / 2**20:.1f} MiB, over {MAX_TOTAL_BYTES >> 20} MiB: "
                                      "keep one run per question and timelines only where the dashboard shows them")


def test_the_reference_profile_is_a_committed_measured_profile_and_the_default():
    labels = [data.display_name(p, [EXAMPLES_DIR]) for p in data.find_profiles([EXAMPLES_DIR])]
    assert data.REFERENCE_PROFILE in labels
    meta = json.loads((PROJECT_ROOT / data.REFERENCE_PROFILE / "profile.json").read_text())
    assert meta.get("kind", "measured") == "measured"
    assert data.default_profile(labels) == data.REFERENCE_PROFILE
    assert data.reference_first(labels)[0] == data.REFERENCE_PROFILE
    # without it: the first profile found, examples before runs
    assert data.default_profile(["examples/a-estimate", "runs/b"]) == "examples/a-estimate"
    assert data.default_profile([]) is None


def test_the_dashboard_opens_on_the_reference_profile_not_the_first_folder(monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest

    from dashboard_fixtures import make_synthetic

    root = tmp_path / "examples"
    make_synthetic(root, "aaa-sorts-first")
    make_synthetic(root, Path(data.REFERENCE_PROFILE).name)
    monkeypatch.setenv(data.DATA_DIRS_ENV, os.pathsep.join([str(root), str(tmp_path / "runs")]))
    at = AppTest.from_file(str(PROJECT_ROOT / "dashboard" / "app.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["profile_path"] == data.REFERENCE_PROFILE
    picker = next(s for s in at.sidebar.selectbox if s.label == "Profile")
    assert picker.options[:2] == [data.REFERENCE_PROFILE, "examples/aaa-sorts-first"]
