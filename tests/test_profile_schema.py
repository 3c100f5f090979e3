"""ppsd/profile/schema.py: the versioned, typed profile.json, its checks of every value, the upgrade of
older versions (`ppsd profile upgrade`), the tables checked when read, files kept in the folder, and
the reference generated into docs/contracts.md. (The property-based corruption test is
tests/test_profile_corruption.py.)"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import ppsd.profile.schema as schema
from ppsd.cli import main
from ppsd.errors import UserError
from ppsd.paths import EXAMPLES_DIR, PROJECT_ROOT
from ppsd.profile import SCHEMA_VERSION, load_profile
from ppsd.profile.synthetic import write_synthetic_profile

EXAMPLE = EXAMPLES_DIR / "smollm2-135m-cpu"
STOPS = EXAMPLES_DIR / "smollm2-135m-confidence-stop-amd-epyc" / "stops" / "profile"  # runtime probe + waiting cut
COMMITTED = sorted(p.parent for p in list(EXAMPLES_DIR.rglob("profile.json"))
                   + list((PROJECT_ROOT / "tests" / "fixtures").rglob("profile.json")))


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit(folder: Path, change) -> Path:
    meta = json.loads((folder / "profile.json").read_text())
    change(meta)
    (folder / "profile.json").write_text(json.dumps(meta))
    return folder


def _refusal(folder: Path) -> str:
    with pytest.raises(UserError) as exc:
        load_profile(folder)
    text = str(exc.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("folder", COMMITTED, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_committed_profile_is_at_this_version_and_valid(folder):
    meta = json.loads((folder / "profile.json").read_text())
    assert meta["schema_version"] == SCHEMA_VERSION == 3
    assert schema.upgrade(meta) == meta  # nothing left to fill
    load_profile(folder)


def test_the_committed_reference_is_the_generated_one():
    from ppsd.profile.reference import BEGIN_MARK, END_MARK, markdown

    text = (PROJECT_ROOT / "docs" / "contracts.md").read_text()
    start, end = text.index(BEGIN_MARK), text.index(END_MARK) + len(END_MARK)
    assert text[start:end] == markdown(), "regenerate: python -m ppsd.profile.reference --write"
    assert "| `latency.corun.slowdown` |" in markdown() and ">= 0.95" in markdown()


def _as_version_2(folder: Path) -> Path:
    """The folder's profile.json as the version before: the fields holding an upgrade default left out."""
    def down(meta):
        meta["schema_version"] = 2
        for head in (meta["latency"].get("exit_heads") or {}).values():
            if head.get("timing") == "hot_loop":
                del head["timing"]
        sampled = meta["acceptance"].get("sampled") or {}
        if sampled.get("trajectories") == 1:
            del sampled["trajectories"]
        if meta.get("warnings") == []:
            del meta["warnings"]
    return _edit(folder, down)


def test_an_older_profile_upgrades_in_memory_and_prices_as_before(tmp_path):
    old = _as_version_2(_copy(EXAMPLE, tmp_path / "v2"))
    new, now = load_profile(old), load_profile(EXAMPLE)
    assert new.meta == now.meta and schema.absent_defaults(json.loads((old / "profile.json").read_text())) == ["warnings",
        "latency.exit_heads.<name>.timing"]
    for name in ("hop_ms", "pass_jitter_cv", "lockstep_jitter_cv", "calibration_doubt", "pipeline_slowdown_cv"):
        assert getattr(new, name)() == getattr(now, name)()
    assert new.piece_calibration == now.piece_calibration and new.beta_temperatures() == now.beta_temperatures()
    assert new.corun_slowdown(2) == now.corun_slowdown(2) and new.corun_stage_bias(2) == now.corun_stage_bias(2)
    assert new.layer_ms(3, 2, 300) == now.layer_ms(3, 2, 300) and new.at_parallel(2).head_ms(4) == now.at_parallel(2).head_ms(4)
    assert new.exit_head_ms("vocab4096", 1) == now.exit_head_ms("vocab4096", 1)


def test_profile_upgrade_writes_in_place_or_a_new_folder_and_never_replaces_without_force(tmp_path, capsys):
    old = _as_version_2(_copy(EXAMPLE, tmp_path / "v2"))
    assert main(["profile", "upgrade", str(old), "--out", str(tmp_path / "v3")]) == 0
    assert json.loads((old / "profile.json").read_text())["schema_version"] == 2  # the source untouched
    upgraded = json.loads((tmp_path / "v3" / "profile.json").read_text())
    assert upgraded["schema_version"] == 3 and upgraded == json.loads((EXAMPLE / "profile.json").read_text())
    assert (tmp_path / "v3" / "acceptance_sampled.csv.gz").read_bytes() == (old / "acceptance_sampled.csv.gz").read_bytes()
    assert main(["profile", "upgrade", str(old), "--out", str(tmp_path / "v3")]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["profile", "upgrade", str(old), "--out", str(tmp_path / "v3"), "--force"]) == 0
    assert main(["profile", "upgrade", str(old)]) == 0
    assert (old / "profile.json").read_text() == (tmp_path / "v3" / "profile.json").read_text()
    assert "schema 2 -> 3" in capsys.readouterr().out
    assert main(["profile", "upgrade", str(old)]) == 0  # idempotent
    assert "at schema 3 already" in capsys.readouterr().out


def test_profile_upgrade_refuses_a_corrupt_profile_and_writes_nothing(tmp_path, capsys):
    old = _edit(_as_version_2(_copy(EXAMPLE, tmp_path / "v2")),
                lambda m: m["latency"]["hop"].update(median_ms=-0.04))
    before = (old / "profile.json").read_bytes()
    assert main(["profile", "upgrade", str(old)]) == 2
    err = capsys.readouterr().err.strip()
    assert "latency.hop.median_ms is -0.04" in err and "\n" not in err
    assert (old / "profile.json").read_bytes() == before
    assert main(["profile", "upgrade", str(old), "--out", str(tmp_path / "x")]) == 2 and not (tmp_path / "x").exists()


@pytest.mark.parametrize("field, value", [
    ("corun.slowdown", [1.0, 0.82]),
    ("pipeline.slowdown", 0.9),
    ("pipeline.runtime.slowdown_per_stage", [1.03, 0.93]),
    ("pipeline.runtime.waiting.last_stage_slowdown", 0.5),
])
def test_a_physically_impossible_probe_reading_is_refused_on_load(tmp_path, field, value):
    def put(meta):
        block = meta["latency"]
        *parents, last = field.split(".")
        for key in parents:
            block = block[key]
        block[last] = value
    text = _refusal(_edit(_copy(STOPS, tmp_path / "p"), put))
    assert f"latency.{field}" in text and "not physical" in text and "idle machine" in text


def test_per_round_readings_below_one_are_not_refused():
    # a round's reading is noise the median round leaves out; only the kept figures price a plan
    meta = json.loads((STOPS / "profile.json").read_text())
    assert min(min(r["slowdown_per_stage"]) for r in meta["latency"]["pipeline"]["runtime"]["rounds"]) < 0.95
    load_profile(STOPS)


def test_the_profiler_measures_an_impossible_reading_again_and_refuses_if_it_persists():
    from profiler.latency import PHYSICAL_TRIES, remeasured

    readings = iter([[1.0, 0.82], [1.0, 1.04]])
    calls = []

    def corun():
        calls.append(1)
        return {"processes": [1, 2], "slowdown": next(readings)}
    assert remeasured(corun, "latency.corun")["slowdown"] == [1.0, 1.04] and len(calls) == 2
    calls.clear()
    with pytest.raises(UserError) as exc:
        remeasured(lambda: calls.append(1) or {"slowdown": 1.05, "runtime": {"slowdown": 0.9}}, "latency.pipeline")
    assert len(calls) == PHYSICAL_TRIES and "latency.pipeline.runtime.slowdown = 0.900" in str(exc.value)
    assert remeasured(lambda: None, "latency.pipeline") is None  # a probe that did not run


@pytest.mark.parametrize("name", ["../../../../etc/passwd", "/etc/passwd", "sub/../../x.csv.gz", "~/x"])
def test_files_a_profile_names_stay_inside_its_folder(tmp_path, name):
    for field in ("file", "generations_file"):
        folder = _edit(_copy(EXAMPLE, tmp_path / f"p-{field}-{len(name)}"), lambda m: m["acceptance"].update({field: name}))
        text = _refusal(folder)
        assert f"acceptance.{field}" in text and "inside its folder" in text


def test_a_symlink_out_of_the_folder_is_refused(tmp_path):
    outside = tmp_path / "outside.csv.gz"
    outside.write_bytes((EXAMPLE / "acceptance.csv.gz").read_bytes())
    folder = _copy(EXAMPLE, tmp_path / "p")
    (folder / "acceptance.csv.gz").unlink()
    (folder / "acceptance.csv.gz").symlink_to(outside)
    assert "acceptance.file 'acceptance.csv.gz' leads out of" in _refusal(folder)
    view = _edit(_copy(EXAMPLE, tmp_path / "v"), lambda m: m["acceptance"].update(dir="/etc", file="passwd"))
    assert "acceptance.dir '/etc' is not a profile folder" in _refusal(view)


def _small(tmp_path, **kw):
    return write_synthetic_profile(tmp_path / "s", alpha_by_exit=lambda e: 0.5, num_layers=6, confidence=True,
                                   beta_by_temperature={0.7: lambda e: 0.6}, **kw)


def _rewrite(file: Path, column: str, value) -> None:
    """The table at `file` with `value` in `column` of its first row (the column added, 0, if absent)."""
    df = pd.read_csv(file, dtype={"prompt_id": str, "category": str, "head": str})
    if column not in df.columns:
        df[column] = 0
    df = df.astype({column: object})
    df.loc[0, column] = value
    file.write_bytes(gzip.compress(df.to_csv(index=False).encode()))


@pytest.mark.parametrize("column, value, rule", [
    ("match", 5, "a match is 0 or 1"), ("match", -1, "a match is 0 or 1"), ("match", float("nan"), "a match is 0 or 1"),
    ("beta", 7.0, "[0, 1]"), ("confidence", 1.5, "[0, 1]"), ("confidence", float("nan"), "all recorded or none"),
    ("exit_layer", 6, "[1, 6)"), ("exit_layer", 0, "[1, 6)"), ("position", -1, ">= 0"), ("head", "nope", "heads are"),
    ("match", "x", "not a number"),
])
def test_the_acceptance_table_is_checked_by_column_and_range(tmp_path, column, value, rule):
    prof = _small(tmp_path)
    file = prof.path / "acceptance.csv.gz"
    _rewrite(file, column, value)
    with pytest.raises(UserError) as exc:
        load_profile(prof.path).acceptance
    text = str(exc.value)
    assert f"acceptance.csv.gz column {column}" in text and rule in text and "row 2" in text and "\n" not in text


@pytest.mark.parametrize("column, value, rule", [
    ("beta", 7.0, "[0, 1]"), ("temperature", 0.3, "temperatures are those recorded"), ("trajectory", -1, ">= 0"),
    ("beta", float("inf"), "[0, 1]"),
])
def test_the_sampled_table_is_checked_by_column_and_range(tmp_path, column, value, rule):
    prof = _small(tmp_path)
    file = prof.path / "acceptance_sampled.csv.gz"
    _rewrite(file, column, value)
    with pytest.raises(UserError) as exc:
        load_profile(prof.path).beta_rows(0.7)
    assert f"acceptance_sampled.csv.gz column {column}" in str(exc.value) and rule in str(exc.value)


def test_generations_are_checked(tmp_path):
    prof = _small(tmp_path)
    (prof.path / "generations.jsonl").write_text(json.dumps({"prompt_id": "p0", "token_ids": [1, -2]}) + "\n")
    with pytest.raises(UserError, match=r"generations.jsonl:1.token_ids\[1\] is -2"):
        load_profile(prof.path).generations()


def test_zero_time_tables_are_refused_in_a_measured_profile_only(tmp_path):
    zero = write_synthetic_profile(tmp_path / "zero", num_layers=4, layer_ms=0.0, head_ms=0.0, embed_ms=0.0)
    assert zero.kind == "estimated" and zero.layer_ms(0) == 0.0  # an emulated machine's zero-time layers
    measured = _edit(_copy(zero.path, tmp_path / "m"), lambda m: m.update(kind="measured"))
    assert "latency.layers.median_ms holds a time of 0" in _refusal(measured)


def test_one_line_names_the_field_of_each_kind_of_corruption(tmp_path):
    cases = [
        (lambda m: m["latency"]["corun"].update(slowdown=[1.0, float("nan")]), "latency.corun.slowdown[1] is nan"),
        (lambda m: m["latency"]["layers"]["median_ms"][0][0].__setitem__(0, 1e308), "latency.layers.median_ms[0][0][0]"),
        (lambda m: m["model"].update(num_layers="30"), "model.num_layers is '30'"),
        (lambda m: m["model"].pop("id"), "model.id is missing"),
        (lambda m: m["latency"].update(n_values=[1, 3, 2]), "latency.n_values is [1, 3, 2]: it must be increasing"),
        (lambda m: m["latency"]["head"]["p90_ms"].__setitem__(0, 0), "latency.head.p90_ms holds a time of 0"),
        (lambda m: m["latency"]["pipeline"].update(exit_layer=30), "latency.pipeline.exit_layer is 30"),
        (lambda m: m["latency"]["whole_step"].update(median_ms=0), "latency.whole_step.median_ms is 0"),
        (lambda m: m["hardware"].update(cores=True), "hardware.cores is True"),
    ]
    for i, (change, expected) in enumerate(cases):
        text = _refusal(_edit(_copy(EXAMPLE, tmp_path / f"c{i}"), change))
        assert expected in text and text.startswith(f"profile {tmp_path / f'c{i}'} is malformed: ")
