"""ppsd/profile/ (the profile contract): which temperatures a profile holds
beta at (schema 2), old profiles still load, and the typed parts the simulator reads."""

from __future__ import annotations

import json
import shutil

import pytest

from ppsd.errors import UserError
from ppsd.paths import EXAMPLES_DIR
from ppsd.profile import READABLE_VERSIONS, SAMPLED_FILE, SCHEMA_VERSION, load_profile
from ppsd.profile.synthetic import write_synthetic_profile

EXAMPLE = EXAMPLES_DIR / "smollm2-135m-cpu"


@pytest.fixture
def sampled(tmp_path):
    return write_synthetic_profile(tmp_path / "s", alpha_by_exit=lambda e: 0.5, num_layers=6,
                                   beta_by_temperature={0.7: lambda e: 0.6, 1.0: lambda e: 0.3})


def test_a_schema_1_profile_still_loads_with_its_legacy_beta(tmp_path):
    assert SCHEMA_VERSION == 3 and READABLE_VERSIONS == (1, 2, 3)
    old = tmp_path / "old"
    shutil.copytree(EXAMPLE, old)
    meta = json.loads((old / "profile.json").read_text())
    meta["schema_version"] = 1
    meta["acceptance"].pop("sampled", None)  # schema 1 had no sampled trajectories
    (old / "profile.json").write_text(json.dumps(meta))
    (old / "acceptance_sampled.csv.gz").unlink(missing_ok=True)
    prof = load_profile(old)
    t = float(meta["acceptance"]["temperature"])
    assert prof.temperatures() == [0.0, t] and prof.beta_trajectory == "greedy"
    assert prof.beta_rows(t)["beta"].equals(prof.acceptance[prof.acceptance["head"] == "shared"]["beta"])


def test_sampled_profile_lists_its_temperatures_and_refuses_others(sampled):
    assert sampled.temperatures() == [0.0, 0.7, 1.0] and sampled.beta_trajectory == "sampled"
    assert sampled.match_temperature(0.7000000001) == 0.7
    means = sampled.beta_by_exit(1.0)
    assert set(means) == set(range(1, 6)) and all(abs(v - 0.3) < 0.01 for v in means.values())
    # the legacy greedy-trajectory beta (0.5 in the synthetic match table) is not what T = 1 uses
    assert sampled.beta_by_exit(1.0) != pytest.approx(sampled.alpha_by_exit())
    for t in (0.5, 0.85, 2.0):  # between, beside and past the recorded ones: no interpolation
        with pytest.raises(UserError) as exc:
            sampled.match_temperature(t)
        text = str(exc.value)
        assert "0 (greedy), 0.7, 1" in text and f"{t:g}" in text and "\n" not in text
    with pytest.raises(UserError, match="exit head 'vocab64'"):
        sampled.beta_rows(0.7, head="vocab64")


def test_malformed_sampled_blocks_are_refused(sampled):
    meta = json.loads((sampled.path / "profile.json").read_text())
    meta["acceptance"]["sampled"]["temperatures"] = [0.0]
    (sampled.path / "profile.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match=r"acceptance\.sampled\.temperatures\[0\] is 0\.0"):
        load_profile(sampled.path)
    meta["acceptance"]["sampled"]["temperatures"] = [0.7]
    (sampled.path / "profile.json").write_text(json.dumps(meta))
    (sampled.path / SAMPLED_FILE).unlink()
    with pytest.raises(UserError, match="missing"):
        load_profile(sampled.path)


def test_unknown_versions_are_still_refused(tmp_path):
    d = tmp_path / "v99"
    shutil.copytree(EXAMPLE, d)
    meta = json.loads((d / "profile.json").read_text())
    meta["schema_version"] = 99
    (d / "profile.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match="schema_version 99, this ppsd reads 1, 2 or 3"):
        load_profile(d)


def test_a_profile_without_optional_blocks_has_empty_typed_parts(tmp_path):
    from ppsd.profile import ControlPlane, DrawCosts, PassOverheads

    p = write_synthetic_profile(tmp_path / "plain", alpha_by_exit=lambda e: 0.5, num_layers=6)
    assert p.overheads == ControlPlane() and p.draws == DrawCosts() and not p.draws.measured
    assert p.overheads.pass_overheads_ms(3) == PassOverheads(0.0, 0.0, 0.0, 0.0)
    assert p.overheads.transit_ms(4) == 0.0 and p.draws.sample_ms(1000) is None


def test_the_control_plane_interpolates_between_stage_counts_and_holds_its_ends():
    from ppsd.profile import ControlPlane

    cp = ControlPlane.from_block({"method": "m", "stages": {"2": {"pass_overhead_ms": 0.2, "transit_ms": 0.1},
                                                             "4": {"pass_overhead_ms": 0.4, "transit_ms": 0.3,
                                                                   "middle_pass_overhead_ms": 0.02}}})
    assert cp.pass_overhead_ms(3) == pytest.approx(0.3) and cp.transit_ms(8) == pytest.approx(0.3)
    roles = cp.pass_overheads_ms(4)
    assert (roles.first, roles.first_before_send, roles.middle, roles.last) == (0.4, 0.4, 0.02, 0.4)


def test_a_profile_priced_for_another_profiles_prompts(tmp_path):
    """`Profile.with_acceptance_from`: this profile's latency, the other's traces and generations; refused
    for another model or a profile without traces; `write_acceptance_view` writes it as a folder."""
    from ppsd.errors import UserError
    from ppsd.profile import write_acceptance_view
    from ppsd.profile.synthetic import write_synthetic_profile

    timed = write_synthetic_profile(tmp_path / "timed", alpha_by_exit=lambda e: 0.2, num_layers=12, layer_ms=1.0)
    traffic = write_synthetic_profile(tmp_path / "traffic", alpha_by_exit=lambda e: 0.8, num_layers=12,
                                      layer_ms=9.0, seed=4)
    view = timed.with_acceptance_from(traffic)
    assert view.layer_ms(3) == timed.layer_ms(3) and view.head_ms() == timed.head_ms()
    assert view.alpha_by_exit()[6] == pytest.approx(traffic.alpha_by_exit()[6])
    assert view.alpha_by_exit()[6] > timed.alpha_by_exit()[6] + 0.4
    assert view.acceptance_source == str(traffic.path) and timed.acceptance_source is None
    assert [g["prompt_id"] for g in view.generations()] == [g["prompt_id"] for g in traffic.generations()]
    other_model = write_synthetic_profile(tmp_path / "other", alpha_by_exit=lambda e: 0.5, num_layers=8)
    with pytest.raises(UserError, match="8 layers"):
        timed.with_acceptance_from(other_model)
    with pytest.raises(UserError, match="has no acceptance traces"):
        timed.with_acceptance_from(write_synthetic_profile(tmp_path / "bare", num_layers=12))
    folder = write_acceptance_view(timed.path, traffic.path, tmp_path / "view")
    assert folder.alpha_by_exit() == view.alpha_by_exit() and folder.layer_ms(3) == timed.layer_ms(3)
    assert not (tmp_path / "view" / "acceptance.csv.gz").exists()  # nothing copied: acceptance.dir names the files
