"""Property: a corrupt profile never prices a plan. Committed profiles (and a small synthetic one holding
every block) are corrupted one field at a time (NaN, ±inf, negative, zero, out of range, wrong type,
missing, match 5 / -1 / NaN, β 7, files out of the folder): each is refused with one line naming the field,
by `load_profile` (profile.json, files) or by `ppsd plan` in process (the tables, read when a plan needs
them); a change that keeps every value within its meaning still prices every plan with finite numbers. Any
other exception fails. The meanings below are this test's own (from the profile format's description), not
read from the schema. 210 corrupt profiles in all (`max_examples`), derandomized.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ppsd.cli import main
from ppsd.errors import UserError
from ppsd.paths import EXAMPLES_DIR
from ppsd.profile import load_profile
from ppsd.profile.synthetic import write_synthetic_profile

COMMITTED = {
    "cpu": EXAMPLES_DIR / "smollm2-135m-cpu",  # parallel tables, exit heads, pipeline probe, sampled β
    "stops": EXAMPLES_DIR / "smollm2-135m-confidence-stop-amd-epyc" / "stops" / "profile",  # runtime probe, batch
    "hf": EXAMPLES_DIR / "smollm2-135m-hf-assisted-amd-epyc" / "target-run" / "profile",  # latency.hf
    "estimate": EXAMPLES_DIR / "random-llama-2-7b-h200" / "estimate-llama-2-7b-h200",  # an estimated GPU profile
}
PLAN = ["--json", "--tokens", "48", "--max-draft-len", "2", "--devices", "2"]
SETTINGS = dict(database=None, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# What each field means, as a kind of value: which corruptions break that meaning.
TIME, NONNEG, SLOWDOWN, RATIO, COUNT, COUNT0, TEMP, TEMP0, LAYERS, GRID, SIGNED = (
    "time", "nonneg", "slowdown", "ratio", "count", "count0", "temp", "temp0", "layers", "grid", "signed")
FIELDS = [  # (path: * any key, [*] any index; meaning; required)
    ("model.num_layers", LAYERS, True),
    ("latency.n_values[*]", GRID, True),
    ("latency.context_values[*]", GRID, True),
    ("latency.layers.median_ms[*][*][*]", TIME, True),
    ("latency.layers.p10_ms[*][*][*]", TIME, True),
    ("latency.layers.p90_ms[*][*][*]", TIME, True),
    ("latency.embedding.median_ms[*]", TIME, True),
    ("latency.head.median_ms[*]", TIME, True),
    ("latency.head.p90_ms[*]", TIME, True),
    ("latency.exit_heads.*.median_ms[*]", TIME, True),
    ("latency.parallel.tables.*.layers.median_ms[*][*][*]", TIME, True),
    ("latency.parallel.tables.*.head.median_ms[*]", TIME, True),
    ("latency.parallel.tables.*.speedup_vs_base", RATIO, False),
    ("latency.whole_step.median_ms", TIME, True),
    ("latency.whole_step.calibration", RATIO, False),
    ("latency.hop.median_ms", NONNEG, True),
    ("latency.pipeline.hop.median_ms", NONNEG, True),
    ("latency.pipeline.pass_cv", NONNEG, False),
    ("latency.corun.slowdown[*]", SLOWDOWN, True),
    ("latency.pipeline.slowdown", SLOWDOWN, False),
    ("latency.pipeline.slowdown_per_stage[*]", SLOWDOWN, True),
    ("latency.pipeline.runtime.slowdown", SLOWDOWN, True),
    ("latency.pipeline.runtime.slowdown_per_stage[*]", SLOWDOWN, True),
    ("latency.pipeline.runtime.rounds[*].slowdown_per_stage[*]", RATIO, True),
    ("latency.pipeline.runtime.pass_jitter_cv", NONNEG, False),
    ("latency.pipeline.runtime.waiting.last_stage_slowdown", SLOWDOWN, True),
    ("latency.control_plane.stages.*.pass_overhead_ms", NONNEG, True),
    ("latency.sampling.median_ms[*]", TIME, True),
    ("latency.sampling.vocab[*]", COUNT, True),
    ("latency.prefill.median_ms[*]", TIME, True),
    ("latency.batch.layers_ratio[*][*][*]", RATIO, True),
    ("latency.batch.head_ms[*][*]", TIME, True),
    ("latency.hf.round_overhead_ms", SIGNED, False),
    ("latency.hf.acceptance.*.scale", RATIO, False),
    ("acceptance.sampled.temperatures[*]", TEMP, True),
    ("acceptance.temperature", TEMP0, False),
    ("hardware.cores", COUNT0, False),
    ("timing.threads", COUNT, False),
    ("estimate.min_gpus_for_weights", COUNT, False),
]
NUMERIC = {TIME, NONNEG, SLOWDOWN, RATIO, COUNT, COUNT0, TEMP, TEMP0, LAYERS, GRID, SIGNED}
CORRUPTIONS = {  # name -> (new value from the old, the meanings it breaks)
    "nan": (lambda v: float("nan"), NUMERIC),
    "inf": (lambda v: float("inf"), NUMERIC),
    "-inf": (lambda v: float("-inf"), NUMERIC),
    "huge": (lambda v: 1e308, NUMERIC),
    "string": (lambda v: str(v), NUMERIC),
    "bool": (lambda v: True, NUMERIC),
    "list": (lambda v: [v], NUMERIC),
    "object": (lambda v: {"value": v}, NUMERIC),
    "negative": (lambda v: -abs(float(v)) - 1.0, NUMERIC - {SIGNED}),
    "zero": (lambda v: 0, {TIME, SLOWDOWN, RATIO, COUNT, TEMP, LAYERS}),
    "unphysical": (lambda v: 0.82, {SLOWDOWN}),
    "fraction": (lambda v: float(v) + 0.5, {COUNT, COUNT0, LAYERS, GRID}),
    "one more layer": (lambda v: int(v) + 1, {LAYERS}),
    "repeat": ("repeat", {GRID}),  # the grid point before (after, at the start) again: not increasing
    "null": (lambda v: None, "required"),
    "missing": ("missing", "required"),
}


def _keys(pattern: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+|\[\*\]", pattern)]


def _exists(meta, pattern: str) -> bool:
    node = meta
    for key in _keys(pattern):
        if key == "[*]":
            if not isinstance(node, list) or not node:
                return False
            node = node[0]
        elif key == "*":
            if not isinstance(node, dict) or not node:
                return False
            node = next(iter(node.values()))
        elif isinstance(node, dict) and node.get(key) is not None:
            node = node[key]
        else:
            return False
    return True


def _concrete(meta, pattern: str, draw) -> tuple[list, str]:
    """A concrete path of `pattern` in `meta` (indices and keys drawn) and its dotted text."""
    node, path, text = meta, [], ""
    for key in _keys(pattern):
        if key == "[*]":
            key = draw(st.integers(0, len(node) - 1))
            text += f"[{key}]"
        else:
            key = draw(st.sampled_from(sorted(node))) if key == "*" else key
            text += f".{key}" if text else key
        path.append(key)
        node = node[key]
    return path, text


def _apply(meta, path: list, corruption: str) -> None:
    parent = meta
    for key in path[:-1]:
        parent = parent[key]
    last, (change, _) = path[-1], CORRUPTIONS[corruption]
    if change == "missing":
        del parent[last]
    elif change == "repeat":
        parent[last] = parent[last - 1] if last > 0 else parent[last + 1]
    else:
        parent[last] = change(parent[last])


def _breaks(meaning: str, required: bool, corruption: str, in_list: bool, measured: bool) -> bool:
    broken = CORRUPTIONS[corruption][1]
    if broken == "required":
        return required or (in_list and corruption == "null")
    if corruption == "zero" and meaning == TIME and not measured:
        return False  # an estimated or emulated profile may price a piece at 0 ms
    return meaning in broken


def _plan(folder: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["plan", "--profile", str(folder), *PLAN, *extra])
    return rc, out.getvalue(), err.getvalue()


def _names(line: str, field: str) -> None:
    plain = lambda t: re.sub(r"\[\d+\]", "", t)  # noqa: E731
    assert "\n" not in line.strip() and plain(field) in plain(line), f"the refusal does not name {field}: {line}"


def _refused(folder: Path, field: str, *extra: str) -> None:
    """`ppsd plan` refuses the profile: exit 2, one line on stderr naming `field`."""
    rc, _, err = _plan(folder, *extra)
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1, f"{field}: not refused (rc {rc}): {err[-500:]}"
    _names(lines[0], field)


def _refused_on_load(folder: Path, field: str) -> None:
    """`load_profile` refuses the profile with one line naming `field` (nothing is priced from it)."""
    with pytest.raises(UserError) as exc:
        load_profile(folder)
    _names(str(exc.value), field)


def _priced(folder: Path, *extra: str) -> None:
    rc, out, err = _plan(folder, *extra)
    assert rc == 0, err
    values = []

    def walk(x):
        if isinstance(x, dict):
            [walk(v) for v in x.values()]
        elif isinstance(x, list):
            [walk(v) for v in x]
        elif isinstance(x, float):
            values.append(x)
    rows = json.loads(out)
    walk(rows)
    assert rows and all(math.isfinite(v) for v in values)


def _small_meta_blocks(meta: dict) -> None:
    """The blocks a synthetic profile lacks, with values within their meaning."""
    lat = meta["latency"]
    lat["pipeline"] = {"exit_layer": 3, "stage_bounds": [0, 3, 6], "slowdown": 1.05, "slowdown_per_stage": [1.04, 1.06],
                       "slowdown_base": "alone", "pass_cv": 0.02,
                       "hop": {"median_ms": 0.05, "p10_ms": 0.04, "p90_ms": 0.07, "samples": 20},
                       "runtime": {"slowdown": 1.04, "slowdown_per_stage": [1.02, 1.06], "round_kept": 0,
                                   "rounds": [{"slowdown_per_stage": [1.02, 1.06], "pass_jitter_cv": 0.01},
                                              {"slowdown_per_stage": [0.97, 1.1], "pass_jitter_cv": 0.02}],
                                   "slowdown_cv": 0.01, "exit_layer": 3, "pass_jitter_cv": 0.01,
                                   "waiting": {"exit_layer": 5, "last_stage_slowdown": 1.08}}}
    lat["whole_step"] = {"median_ms": 9.5, "p10_ms": 9.0, "p90_ms": 10.5, "sum_of_parts_ms": 9.4, "ratio": 0.99,
                         "calibration": 1.01, "method": "paired"}
    lat["prefill"] = {"lengths": [32, 128], "median_ms": [20.0, 60.0], "p10_ms": [19.0, 58.0], "p90_ms": [22.0, 63.0]}
    lat["control_plane"] = {"stages": {"2": {"pass_overhead_ms": 0.1, "transit_ms": 0.05, "hop_jitter_ms": 0.01}}}


class Templates(dict):
    def __repr__(self) -> str:  # hypothesis prints a failing example's arguments
        return f"Templates({', '.join(self)})"


def _generations(acceptance_file: Path) -> str:
    """generations.jsonl for the prompts of a synthetic acceptance table."""
    df = pd.read_csv(acceptance_file, dtype={"prompt_id": str, "category": str, "head": str})
    rows = df.drop_duplicates("prompt_id")
    return "".join(json.dumps({"prompt_id": r.prompt_id, "category": r.category, "prompt": "p",
                               "prompt_tokens": list(range(1, 21)), "prompt_len": 20,
                               "token_ids": list(range(100, 164))}) + "\n" for r in rows.itertuples())


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """name -> (folder, profile.json as a dict): the committed profiles, copied once, and the small one."""
    root = tmp_path_factory.mktemp("templates")
    out = {}
    for name, src in COMMITTED.items():
        shutil.copytree(src, root / name)
        out[name] = root / name
    small = write_synthetic_profile(root / "small", alpha_by_exit=lambda e: 0.3 + 0.1 * e, num_layers=6, layer_ms=1.0,
                                    head_ms=3.0, embed_ms=0.1, hop_ms=0.05, corun_slowdown=1.1, confidence=True,
                                    beta_by_temperature={0.7: lambda e: 0.5}, thread_speedup={2: 1.6},
                                    sample_ms={100: 0.1}, vocab_size=100, batch_free_tokens=4)
    meta = json.loads((small.path / "profile.json").read_text())
    _small_meta_blocks(meta)
    (small.path / "profile.json").write_text(json.dumps(meta))
    (small.path / "generations.jsonl").write_text(_generations(small.path / "acceptance.csv.gz"))
    out["small"] = small.path
    return Templates({name: (folder, (folder / "profile.json").read_text()) for name, folder in out.items()})


@contextlib.contextmanager
def _folder(template: Path, meta: dict | None = None):
    """A fresh folder: `template`'s files hard-linked (copied where links fail), `meta` as its profile.json."""
    tmp = Path(tempfile.mkdtemp(prefix="ppsd-corrupt-"))
    folder = tmp / "p"
    folder.mkdir()
    try:
        for f in template.iterdir():
            if f.name == "profile.json":
                continue
            try:
                os.link(f, folder / f.name)
            except OSError:
                shutil.copy2(f, folder / f.name)
        (folder / "profile.json").write_text(json.dumps(meta if meta is not None else
                                                        json.loads((template / "profile.json").read_text())))
        yield folder
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cases(templates) -> list[tuple[str, str, str, bool]]:
    metas = {name: json.loads(text) for name, (_, text) in templates.items()}
    return [(name, pattern, meaning, required) for name, meta in metas.items()
            for pattern, meaning, required in FIELDS if _exists(meta, pattern)]


@pytest.fixture(scope="module")
def cases(templates):
    return _cases(templates)


def test_the_corruptions_cover_every_block(cases):
    covered = {pattern for _, pattern, _, _ in cases}
    assert covered == {pattern for pattern, _, _ in FIELDS}, {p for p, _, _ in FIELDS} - covered


@settings(max_examples=140, **SETTINGS)
@given(data=st.data())
def test_a_corrupt_profile_json_is_refused_naming_the_field(templates, cases, data):
    name, pattern, meaning, required = data.draw(st.sampled_from(cases), label="field")
    folder, text = templates[name]
    meta = json.loads(text)
    measured = meta.get("kind", "measured") == "measured"
    in_list = pattern.endswith("[*]")
    kinds = [c for c in CORRUPTIONS if _breaks(meaning, required, c, in_list, measured)
             and not (c == "missing" and in_list) and not (c == "repeat" and not in_list)]
    corruption = data.draw(st.sampled_from(kinds), label="corruption")
    path, field = _concrete(meta, pattern, data.draw)
    _apply(meta, path, corruption)
    with _folder(folder, meta) as bad:
        _refused_on_load(bad, field)


TABLE_CORRUPTIONS = {  # file -> column -> values out of the column's meaning
    "acceptance.csv.gz": {"match": [5, -1, float("nan"), 0.5, "x"], "beta": [7.0, -0.1, float("nan"), float("inf")],
                          "confidence": [1.5, -0.2, float("inf"), float("nan")], "exit_layer": [0, 6, -1, 2.5],
                          "position": [-1, 1.5], "head": ["nope"], "prompt_id": [float("nan")]},
    "acceptance_sampled.csv.gz": {"beta": [7.0, -1.0, float("nan"), float("inf")], "temperature": [0.3, -1.0],
                                  "exit_layer": [0, 6], "position": [-1], "confidence": [2.0]},
}


@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_a_corrupt_acceptance_table_is_refused_naming_the_column(templates, data):
    folder, _ = templates["small"]
    file = data.draw(st.sampled_from(sorted(TABLE_CORRUPTIONS)), label="file")
    column = data.draw(st.sampled_from(sorted(TABLE_CORRUPTIONS[file])), label="column")
    value = data.draw(st.sampled_from(TABLE_CORRUPTIONS[file][column]), label="value")
    df = pd.read_csv(folder / file, dtype={"prompt_id": str, "category": str, "head": str})
    row = data.draw(st.integers(0, len(df) - 1), label="row")
    df = df.astype({column: object})
    df.loc[row, column] = value
    with _folder(folder) as bad:
        (bad / file).unlink()
        df.to_csv(bad / file, index=False)
        extra = ("--temperature", "0.7", "--exit-head", "shared") if "sampled" in file else ()
        _refused(bad, f"{file} column {column}", *extra)


GENERATION_CORRUPTIONS = {"token_ids": ["abc", [1, -1], [1.5]], "prompt_id": [None, 3.5], "prompt_tokens": [[-3]]}


@settings(max_examples=10, **SETTINGS)
@given(data=st.data())
def test_corrupt_generations_are_refused_naming_the_line(templates, data):
    folder, _ = templates["small"]
    records = [json.loads(x) for x in (folder / "generations.jsonl").read_text().splitlines()]
    line = data.draw(st.integers(0, len(records) - 1), label="line")
    key = data.draw(st.sampled_from(sorted(GENERATION_CORRUPTIONS)), label="key")
    records[line][key] = data.draw(st.sampled_from(GENERATION_CORRUPTIONS[key]), label="value")
    with _folder(folder) as bad:
        (bad / "generations.jsonl").unlink()
        (bad / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        _refused(bad, f"generations.jsonl:{line + 1}.{key}")


@settings(max_examples=20, **SETTINGS)
@given(field=st.sampled_from(["file", "generations_file", "sampled.file", "dir", "file symlink",
                              "sampled.file symlink"]),
       name=st.sampled_from(["../../../../etc/passwd", "/etc/passwd", "a/../../b.csv.gz", "..", "~/x"]))
def test_a_file_out_of_the_folder_is_refused(templates, field, name):
    folder, text = templates["small"]
    meta = json.loads(text)
    target = meta["acceptance"]["sampled"] if field.startswith("sampled") else meta["acceptance"]
    key = field.split()[0].split(".")[-1]
    with _folder(folder, meta) as bad:
        if field.endswith("symlink"):
            outside = bad.parent / "outside.csv.gz"
            shutil.copy2(bad / target[key], outside)
            (bad / target[key]).unlink()
            (bad / target[key]).symlink_to(outside)
        else:
            target[key] = name
            (bad / "profile.json").write_text(json.dumps(meta))
        _refused_on_load(bad, f"acceptance.{field.split()[0]}")


VALID = ["scale a table", "hop", "co-run", "drop a block", "legacy temperature", "waiting cut", "pass jitter"]


@settings(max_examples=12, **SETTINGS)
@given(data=st.data())
def test_a_change_within_every_meaning_still_prices_finite_plans(templates, data):
    folder, text = templates["small"]
    meta = json.loads(text)
    lat = meta["latency"]
    change = data.draw(st.sampled_from(VALID), label="change")
    f = data.draw(st.floats(0.25, 4.0), label="factor")
    if change == "scale a table":
        table = lat[data.draw(st.sampled_from(["layers", "embedding", "head"]), label="table")]
        for stat in table:
            table[stat] = (np.asarray(table[stat]) * f).tolist()
    elif change == "hop":
        ms = data.draw(st.floats(0.0, 5.0), label="hop ms")
        lat["hop"].update(median_ms=ms, p10_ms=ms, p90_ms=ms)
    elif change == "co-run":
        lat["corun"]["slowdown"][1] = data.draw(st.floats(0.95, 3.0), label="slowdown")
    elif change == "drop a block":
        del lat[data.draw(st.sampled_from(["hop", "corun", "whole_step", "sampling", "batch", "parallel", "pipeline",
                                           "prefill", "control_plane"]), label="block")]
    elif change == "legacy temperature":
        meta["acceptance"]["temperature"] = data.draw(st.floats(0.0, 2.0), label="T")
    elif change == "waiting cut":
        lat["pipeline"]["runtime"]["waiting"]["last_stage_slowdown"] = data.draw(st.floats(0.95, 2.0), label="w")
    else:
        lat["pipeline"]["runtime"]["pass_jitter_cv"] = data.draw(st.floats(0.0, 0.5), label="cv")
    with _folder(folder, meta) as ok:
        _priced(ok)
