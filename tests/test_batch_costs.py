"""sim/batch/costs.py: a pass of B sequences is its batch-1 price times the profile's measured ratio,
interpolated between measured batch sizes and never beyond them; a profile without batch tables answers
for batch 1 only and names the command that adds them."""

from __future__ import annotations

import pytest

from ppsd.errors import UserError
from ppsd.profile.synthetic import write_synthetic_profile
from sim.batch.costs import BatchCosts, check_batch
from sim.model.cost_model import cost_model

LAYERS = 8


@pytest.fixture(scope="module")
def batched(tmp_path_factory):
    return write_synthetic_profile(tmp_path_factory.mktemp("b"), alpha_by_exit=lambda e: 0.6, num_layers=LAYERS,
                                   layer_ms=1.0, head_ms=4.0, embed_ms=0.1, batch_free_tokens=4)


def test_batch_one_is_the_batch_one_price(batched):
    costs, cm = BatchCosts(batched), cost_model(batched)
    assert costs.ar_step(1, 64) == pytest.approx(cm.embed(1) + LAYERS * 1.0 + cm.head(1))


def test_a_pass_grows_once_it_holds_more_tokens_than_stay_free(batched):
    costs = BatchCosts(batched)
    # 4 tokens over the batch stay free; 8 cost twice as much (layers and head alike)
    assert costs.layers(4, 64, 0, LAYERS, 1) == pytest.approx(LAYERS * 1.0)
    assert costs.layers(8, 64, 0, LAYERS, 1) == pytest.approx(2 * LAYERS * 1.0)
    assert costs.head(8, 1) == pytest.approx(2 * 4.0)
    # a verification of 4 positions: 8 sequences hold 32 tokens, 8x as much as batch 1's 4
    assert costs.layers(8, 64, 0, LAYERS, 4) == pytest.approx(8 * LAYERS * 1.0)


def test_between_two_measured_sizes_is_linear(batched):
    costs = BatchCosts(batched)
    assert costs.layers(6, 64, 0, LAYERS, 1) == pytest.approx(1.5 * LAYERS * 1.0)


def test_an_eesd_round_is_its_passes(batched):
    costs = BatchCosts(batched)
    g, e, b = 3, 2, 8
    expected = (g + 1) * (costs.embed(b, 1) + costs.layers(b, 64, 0, e, 1)) + g * costs.exit_head(b) \
        + costs.layers(b, 64, e, LAYERS, g + 1) + costs.head(b, g + 1)
    assert costs.eesd_round(b, 64, e, g) == pytest.approx(expected)


def test_a_batch_size_beyond_the_measured_ones_is_refused_with_the_command(batched):
    with pytest.raises(UserError) as err:
        check_batch(batched, 16)
    assert "not extrapolated" in str(err.value) and "ppsd profile add-batch" in err.value.fix
    assert "1,2,4,8,16" in err.value.fix


def test_a_profile_without_batch_tables_answers_for_batch_one_only(tmp_path):
    plain = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: 0.6, num_layers=LAYERS)
    check_batch(plain, 1)
    with pytest.raises(UserError) as err:
        check_batch(plain, 2)
    assert "one sequence at a time" in str(err.value) and "add-batch" in err.value.fix


def test_reduced_vocabulary_heads_are_not_priced_in_a_batch(batched):
    with pytest.raises(UserError, match="not timed at batch"):
        BatchCosts(batched, "vocab4096")


def test_past_the_widest_batch_context_each_sequence_reads_its_own_cache():
    """Past the batch tables' widest context a pass of B sequences grows B times as fast per column as one
    sequence's (the weights are shared, each cache is read by itself): the batch ratio rises toward B instead
    of being held, with no jump at the last measured width; batch 1 is its own table everywhere."""
    import numpy as np

    from ppsd.paths import EXAMPLES_DIR
    from ppsd.profile import load_profile

    profile = load_profile(EXAMPLES_DIR / "smollm2-135m-serving-intel-xeon" / "profile")
    costs, cm = BatchCosts(profile), cost_model(profile)
    top = float(profile.batch.context_values[-1])
    widths = np.array([top, top + 8, 1024.0, 2048.0])
    n_layers = cm.num_layers
    assert np.allclose(costs.layers(1, widths, 0, n_layers, 1), cm.layers(widths, 0, n_layers, 1))
    for b in (2, 4, 8):
        at = costs.layers(b, widths, 0, n_layers, 1)
        one = cm.layers(widths, 0, n_layers, 1)
        assert at[1] - at[0] < 0.01 * at[0]  # no jump past the last measured width
        assert at[3] - at[2] == pytest.approx(b * (one[3] - one[2]))
        assert at[3] / one[3] > at[0] / one[0]  # the ratio to one sequence grows with the width


def test_a_batch_table_that_dips_past_its_widest_width_never_prices_less_than_at_it():
    """Timing noise on a tiny model can read a wider cache as cheaper; the batch price past the widest batch width
    adds nothing then (never a smaller or non-positive price, which a speedup would divide by)."""
    import numpy as np

    from ppsd.paths import EXAMPLES_DIR
    from ppsd.profile import load_profile

    profile = load_profile(EXAMPLES_DIR / "smollm2-135m-serving-intel-xeon" / "profile")
    costs = BatchCosts(profile)
    top = float(profile.batch.context_values[-1])

    class Dipping:  # the batch-1 layers, halving past the widest batch width
        num_layers = costs.cm.num_layers

        def layers(self, context, lo, hi, n):
            c = np.asarray(context, dtype=float)
            return np.where(c > top, 5.0, 10.0)

    costs.cm = Dipping()
    widths = np.array([top, 2 * top, 8 * top])
    at = costs.layers(8, widths, 0, costs.cm.num_layers, 1)
    assert np.all(at > 0) and np.allclose(at, at[0])
