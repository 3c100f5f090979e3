"""`ppsd profile --analytic` (profiler/analytic_cli.py) through the real `ppsd profile` parser: the
stack choice, honest inputs (batch size, context grid, cross-model acceptance) and their refusals."""

from __future__ import annotations

import json

import pytest

from ppsd.cli import build_parser, main
from ppsd.errors import UserError
from profiler.estimated_profile import write_analytic_profile
from ppsd.profile import load_profile
from ppsd.profile.synthetic import write_synthetic_profile

BASE = ["profile", "--analytic", "--arch", "llama-2-7b", "--hardware", "a100-80gb"]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    return err


def test_stack_flag_and_meta(tmp_path, capsys):
    assert main([*BASE, "--out", str(tmp_path / "c")]) == 0
    assert "compiled stack" in capsys.readouterr().out
    assert main([*BASE, "--stack", "eager", "--out", str(tmp_path / "e")]) == 0
    assert "eager stack" in capsys.readouterr().out
    c, e = load_profile(tmp_path / "c"), load_profile(tmp_path / "e")
    assert c.meta["estimate"]["stack"] == "compiled" and e.meta["estimate"]["stack"] == "eager"
    assert e.meta["latency"]["whole_step"]["median_ms"] > 3 * c.meta["latency"]["whole_step"]["median_ms"]
    assert main([*BASE, "--stack", "eager", "--dispatch-us", "10", "--out", str(tmp_path / "e10")]) == 0
    e10 = load_profile(tmp_path / "e10")
    assert c.layer_ms(0) < e10.layer_ms(0) < e.layer_ms(0)
    assert main([*BASE, "--dispatch-us", "10", "--out", str(tmp_path / "x")]) == 2  # compiled has no host term
    assert "--stack eager" in _one_error_line(capsys)


def test_help_names_the_default_stack_and_why(capsys):
    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "default compiled" in out and "CUDA graphs" in out and "eager" in out


def test_batch_size_refused_above_one_but_measured_option_intact(tmp_path, capsys):
    assert main([*BASE, "--batch-size", "8", "--out", str(tmp_path / "b8")]) == 2
    assert "batch size 8 is not modelled yet; ppsd models batch-1 decoding" in _one_error_line(capsys)
    assert not (tmp_path / "b8").exists()
    # given as 1, or not given (the measured profiler's default of 32 does not count): fine
    assert main([*BASE, "--batch-size", "1", "--out", str(tmp_path / "b1")]) == 0
    assert main([*BASE, "--out", str(tmp_path / "b")]) == 0
    assert load_profile(tmp_path / "b").meta["estimate"]["batch_size"] == 1
    # the measured profiler's --batch-size (prompts generated at once) parses as before
    args = build_parser().parse_args(["profile", "--batch-size", "4", "--model", "tiny-llama"])
    assert args.batch_size == 4 and not args.analytic
    assert build_parser().parse_args(["profile"]).batch_size == 32


def test_context_and_n_values_honoured(tmp_path, capsys):
    assert main([*BASE, "--context-values", "2048,128", "--n-values", "1,4", "--out", str(tmp_path / "g")]) == 0
    prof = load_profile(tmp_path / "g")
    assert list(prof.context_values) == [128, 2048] and list(prof.n_values) == [1, 4]  # sorted, as measured
    assert prof.layer_ms(0, 1, 2048) > prof.layer_ms(0, 1, 128)  # the KV cache read grows with context
    meta = json.loads((tmp_path / "g" / "profile.json").read_text())
    assert meta["latency"]["whole_step"]["context"] == 128
    assert main([*BASE, "--context-values", "64,9000", "--out", str(tmp_path / "long")]) == 2
    assert "maximum context" in _one_error_line(capsys)


def _measured_like(tmp_path, name, model_id, layers):
    prof = write_synthetic_profile(tmp_path / name, alpha_by_exit=lambda e: 0.2 + 0.6 * e / layers,
                                   num_layers=layers, seed=1)
    meta = json.loads((prof.path / "profile.json").read_text())
    meta["model"]["id"] = model_id
    meta["model"]["architecture"] = "LlamaForCausalLM"
    (prof.path / "profile.json").write_text(json.dumps(meta))
    return prof.path


def test_cross_model_acceptance_refused_unless_forced(tmp_path, capsys):
    other = _measured_like(tmp_path, "smol", "smollm2-135m", 30)
    out = tmp_path / "x"
    assert main([*BASE, "--acceptance-from", str(other), "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert "smollm2-135m is not llama-2-7b" in line and "30 layers are not 32" in line
    assert "--force-acceptance-transfer" in line and not out.exists()
    assert main([*BASE, "--acceptance-from", str(other), "--force-acceptance-transfer", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "warning: acceptance transferred from another model" in captured.err
    assert "ANOTHER MODEL" in captured.out
    prof = load_profile(out)
    assert prof.has_acceptance and prof.meta["acceptance"]["transfer"]["reasons"]
    assert any("smollm2-135m" in w for w in prof.meta["warnings"])


def test_same_model_acceptance_passes_silently(tmp_path, capsys):
    # the same model under its other spellings: a random-weight run, a hub id, an alias
    for i, model_id in enumerate(("random:llama-2-7b", "meta-llama/Llama-2-7b-hf", "llama2-7b")):
        src = _measured_like(tmp_path, f"m{i}", model_id, 32)
        prof = write_analytic_profile(tmp_path / f"e{i}", "llama-2-7b", "a100-80gb", acceptance_from=src)
        assert "warnings" not in prof.meta and "transfer" not in prof.meta["acceptance"]
        assert capsys.readouterr().err == ""
    # same name, fewer layers (random:llama-2-7b?layers=2): another model as far as acceptance goes
    cut = _measured_like(tmp_path, "cut", "random:llama-2-7b?layers=2", 2)
    with pytest.raises(UserError, match="2 layers are not 32"):
        write_analytic_profile(tmp_path / "cut-est", "llama-2-7b", "a100-80gb", acceptance_from=cut)
