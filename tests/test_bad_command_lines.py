"""Bad command lines: each is refused with exit code 2 and exactly one line on stderr, `ppsd CMD: error: ...`
naming the flag as typed, no traceback, nothing written, and before any model loads (loading one raises
here, so a refusal that came after the load would fail as an internal error)."""

from __future__ import annotations

import os
import shlex
import stat

import pytest

from ppsd import paths
from ppsd.cli import main
from ppsd.paths import PROJECT_ROOT

EXAMPLES = PROJECT_ROOT / "examples"
PLACES = {"E": EXAMPLES / "smollm2-135m-cpu", "B": EXAMPLES / "smollm2-135m-batch-amd-epyc" / "profile",
          "V": EXAMPLES / "smollm2-135m-cpu-oos-validation-unseen", "H": EXAMPLES / "smollm2-135m-heads"}

# (command line, words its one error line must hold); {E} {B} {V} {H}: committed examples, {tmp}: a fresh
# folder, {file}: a file in it, {ro}: a folder this process may not write in
BAD = [
    # ppsd validate: --plans items against the profile's layers and heads, empty values, outputs
    ("validate --profile {E} --plans ''", "--plans '' names no plan"),
    ("validate --profile {E} --plans ';;;'", "--plans ';;;' names no plan"),
    ("validate --profile {E} --plans eesd:99:3", "--plans item 'eesd:99:3': exit layer 99 is out of range"),
    ("validate --profile {E} --plans eesd:20:0", "--plans item 'eesd:20:0': draft length 0"),
    ("validate --profile {E} --plans ppsd:24:2:head=nope", "--plans item 'ppsd:24:2:head=nope'"),
    ("validate --profile {E} --plans ppsd:15:1", "--plans item 'ppsd:15:1': PPSD needs at least 2 stages"),
    ("validate --profile {E} --plans 'eesd:20:3;ppsd:29:3'", "--plans item 'ppsd:29:3'"),
    ("validate --profile {E} --plans eesd:24:6:stop=1.5", "--plans item 'eesd:24:6:stop=1.5'"),
    ("validate --profile {E} --plans eesd:24:3:alpha=2", "alpha=2 is not a probability"),
    ("validate --profile {E} --plans beam:2:2", "--plans mode 'beam'"),
    ("validate --profile {E} --batch-sizes ''", "--batch-sizes '' names no batch size"),
    ("validate --profile {B} --batch-sizes 1,2 --plans ''", "--plans '' names no plan"),
    ("validate --profile {B} --batch-sizes 1,2 --plans eesd:40:2", "--plans item 'eesd:40:2'"),
    ("validate --profile {B} --batch-sizes 1,2 --temperature 1.0", "--temperature does not apply with --batch-sizes"),
    ("validate --profile {E} --out {file}", "--out {file} is a file"),
    ("validate --profile {E} --out {V}", "already holds a validation folder"),
    ("validate --profile {E} --out {ro}/val", "is not writable"),
    ("validate --profile {B} --batch-sizes 1,2 --out {ro}/val", "is not writable"),
    ("validate --profile {E} --repeats 0", "--repeats 0"),
    ("validate --profile {E} --exit-head nope", "unknown exit head 'nope'"),
    ("validate --profile {E} --prompts {tmp}/none.jsonl", "does not exist"),
    ("validate --profile {E} --temperature 0.5", "not at 0.5"),
    ("validate --profile {E} --split 1.5", "--split 1.5"),
    # ppsd run: every flag against the model's layer count, read without its weights
    ("run --mode eesd --exit 0", "exit layer 0 is out of range for a 30-layer model"),
    ("run --mode eesd --exit 30", "exit layer 30 is out of range"),
    ("run --model tiny-llama --mode ppsd --exit 5 --stages 3", "3 stages do not fit"),
    ("run --mode eesd --exit 15 --draft-len 0", "--draft-len"),
    ("run --model nope", "unknown model 'nope'"),
    ("run --model {tmp}/none.gguf", "does not exist"),
    ("run --dtype float8 --mode ar", "unknown dtype 'float8'"),
    ("run --limit 0 --mode ar", "--limit 0"),
    ("run --timeline {tmp} --mode ar", "--timeline {tmp} is a folder"),
    ("run --prompts {tmp}/none.jsonl --mode ar", "does not exist"),
    ("run --mode eesd --exit 15 --draft-stop-confidence 2", "--draft-stop-confidence 2"),
    ("run --mode eesd --exit 15 --exit-head vocab4096", "--exit-head vocab4096 needs the head folder"),
    # ppsd profile and its add-* commands: outputs first, then the model spec and the flags naming its layers
    ("profile --model tiny-llama --out {E}", "already holds a profile folder"),
    ("profile --model tiny-llama --out {file}", "--out {file} is a file"),
    ("profile --model tiny-llama --out {ro}/p", "is not writable"),
    ("profile --model nope --out {tmp}/p", "unknown model 'nope'"),
    ("profile --model tiny-llama --hf-exits 9 --out {tmp}/p", "--hf-exits 9"),
    ("profile --model tiny-llama --n-values '' --out {tmp}/p", "--n-values"),
    ("profile --analytic --arch llama-2-7b --hardware h100-sxm --out {E}", "already holds a profile folder"),
    ("profile add-batch {E} --batch-sizes ''", "--batch-sizes '' names no batch size"),
    ("profile add-hf {E} --exits 99", "--exits 99"),
    # ppsd heads
    ("heads train --model tiny-llama --exits 0,9", "--exits '0,9'"),
    ("heads train --model tiny-llama --out {file}", "--out {file} is a file"),
    ("heads eval --heads {H} --acceptance-out {tmp}", "--acceptance-out {tmp} is a folder"),
    # ppsd simulate and plan (no model at all): outputs, empty lists, flags --batch does not price
    ("simulate --profile {E} --mode ppsd --exit 15 --trace-out {tmp}", "--trace-out {tmp} is a folder"),
    ("simulate --profile {E} --mode ppsd --exit 15 --trace-out {ro}/t.json", "is not writable"),
    ("simulate --profile {E} --mode ppsd --exit 15 --stage-bounds ''", "--stage-bounds"),
    ("plan --profile {E} --draft-stops ''", "--draft-stops"),
    ("plan --profile {E} --draft-stops 1.5", "--draft-stops 1.5"),
    ("plan --profile {B} --batch 4 --draft-stops 0.5", "--draft-stops does not apply with --batch 4"),
    ("plan --profile {B} --batch 16", "outside the sizes"),
    ("plan --profile {E} --batch 4", "no latency.batch"),
    ("plan --profile {E} --top 0", "--top 0"),
    ("plan --profile {E} --bogus", "unrecognized arguments: --bogus"),
    ("plan --profile {E} --tokens many", "argument --tokens"),
]


@pytest.fixture
def guarded(tmp_path, monkeypatch):
    """Loading a model raises; a read-only folder `ro` (its mode bits are what counts, even for root, who
    may write anywhere the bits say no); the working folder and the cache in tmp_path."""
    import runtime.emulate
    import runtime.llm

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the command line was refused")

    monkeypatch.setattr(runtime.llm, "load_model", no_model)
    monkeypatch.setattr(runtime.emulate, "load_emulated", no_model)
    monkeypatch.setattr(paths, "_writable", lambda folder: bool(os.stat(folder).st_mode & stat.S_IWUSR)
                        and os.access(folder, os.W_OK | os.X_OK))
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    (tmp_path / "file.txt").write_text("not a folder\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PPSD_CACHE", str(tmp_path / "cache"))
    yield tmp_path
    (tmp_path / "ro").chmod(0o755)


def _snapshot(*folders) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for f in folders for p in sorted(f.rglob("*"))}


def test_at_least_forty_bad_command_lines():
    assert len(BAD) >= 40 and len({line for line, _ in BAD}) == len(BAD)


@pytest.mark.parametrize("line, words", BAD, ids=[line for line, _ in BAD])
def test_bad_command_line_is_refused_in_one_line_before_any_model_loads(line, words, guarded, capsys):
    where = {**{k: str(v) for k, v in PLACES.items()}, "tmp": str(guarded), "file": str(guarded / "file.txt"),
             "ro": str(guarded / "ro")}
    argv = shlex.split(line.format(**where))
    before = _snapshot(guarded, EXAMPLES)
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"ppsd {argv[0]}") and ": error: " in lines[0], err
    assert words.format(**where) in lines[0]
    assert "Traceback" not in err + out
    assert _snapshot(guarded, EXAMPLES) == before  # nothing written, nothing touched


def test_an_unexpected_error_is_one_line_saying_it_is_a_bug(monkeypatch, capsys):
    """A bug reached by some input (a profile value no check caught) is never a bare traceback: one line naming
    the exception and how to see its traceback, exit code 1 (not the 2 of a refusal)."""
    def broken(args):
        raise ZeroDivisionError("float division by zero")

    argv = ["plan", "--profile", str(PLACES["E"])]
    monkeypatch.setattr("ppsd.cli.build_parser", _parser_with(argv[0], broken))
    assert main(argv) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ppsd plan: internal error: ZeroDivisionError: float division")
    assert "PPSD_TRACEBACK=1" in lines[0]
    monkeypatch.setenv("PPSD_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        main(argv)


def _parser_with(command: str, handler):
    """build_parser, with `command`'s handler replaced."""
    from ppsd import cli

    real = cli.build_parser

    def build():
        parser = real()
        sub = next(a for a in parser._actions if a.dest == "command")  # noqa: SLF001
        sub.choices[command].set_defaults(func=handler)
        return parser

    return build


def test_a_refused_write_is_one_line(monkeypatch, capsys, tmp_path):
    """An OSError the checks could not foresee (a disk that fills, a folder made read-only mid-run) is one line
    with the path, exit code 2."""
    def full(args):
        raise OSError(28, "No space left on device", str(tmp_path / "x"))

    monkeypatch.setattr("ppsd.cli.build_parser", _parser_with("plan", full))
    assert main(["plan", "--profile", str(PLACES["E"])]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ppsd plan: error: No space left on device: ") and "x" in lines[0]


TORCH_FREE = [  # refusals that come before torch is even imported (seconds, whatever the model's size)
    "validate --profile {E} --plans eesd:99:3", "validate --profile {E} --plans ppsd:24:2:head=nope",
    "validate --profile {B} --batch-sizes 1,2 --plans eesd:40:2", "run --mode eesd --exit 30",
    "profile --model tiny-llama --out {E}", "profile --model tiny-llama --hf-exits 9 --out {tmp}/p",
    "heads train --model tiny-llama --exits 0,9", "simulate --profile {E} --mode ppsd --exit 15 --trace-out {tmp}",
]


def test_flag_refusals_come_before_torch_is_imported(tmp_path):
    import subprocess
    import sys

    where = {**{k: str(v) for k, v in PLACES.items()}, "tmp": str(tmp_path)}
    lines = [shlex.split(line.format(**where)) for line in TORCH_FREE]
    code = ("import sys; from ppsd.cli import main\n"
            f"codes = [main(argv) for argv in {lines!r}]\n"
            "assert codes == [2] * len(codes), codes\n"
            "assert 'torch' not in sys.modules, 'torch was imported before a refusal'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "PPSD_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == len(lines)  # one line each
