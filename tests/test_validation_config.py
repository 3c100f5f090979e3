"""validation/config.py: the flags become a typed config once, and the refusals the flags
alone decide come before anything loads."""

from __future__ import annotations

import argparse

import pytest

from ppsd.errors import UserError
from validation.config import DEFAULT_SEEDS, ValidateConfig


def _parsed(*argv: str) -> argparse.Namespace:
    from validation.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["validate", *argv])


def test_every_validate_flag_is_a_config_field():
    from validation.serve import ServeSettings

    args = _parsed("--profile", "p")
    names = {f for f in vars(args) if f not in ("command", "func")}
    # no flag is lost between the CLI and a config: the plans' (ValidateConfig) or --serve's (ServeSettings)
    assert names <= set(ValidateConfig.__dataclass_fields__) | set(ServeSettings.__dataclass_fields__) | {"serve"}
    serve_only = names - set(ValidateConfig.__dataclass_fields__) - {"serve"}
    assert serve_only and serve_only <= set(ServeSettings.__dataclass_fields__)
    config = ValidateConfig.from_args(args)
    assert config.profile == "p" and config.rounds == 1 and config.draws == 200 and not config.sampled
    assert config.seed_list == list(range(DEFAULT_SEEDS))


@pytest.mark.parametrize("argv,words", [
    ([], "needs a profile"),
    (["--profile", "a", "--emulate", "b"], "different profiles"),
    (["--profile", "a", "--split", "1.5"], "not a fraction"),
    (["--profile", "a", "--unseen"], "--unseen picks"),
    (["--profile", "a", "--draws", "3"], "too few"),
    (["--profile", "a", "--rounds", "0"], "--rounds 0"),
    (["--profile", "a", "--seeds", "3"], "--seeds applies"),
    (["--emulate", "a", "--temperature", "0.8"], "--emulate"),
    (["--profile", "a", "--turns", "-1"], "--turns -1"),
    (["--profile", "a", "--turns", "1", "--ar-once"], "--turns pairs greedy"),
    (["--profile", "a", "--turns", "1", "--temperature", "0.7", "--seeds", "2"], "--turns pairs greedy"),
    (["--profile", "a", "--plans", "eesd:20:x"], "is not mode:exit"),  # before the model loads
    (["--profile", "a", "--plans", "ppsd:15:2:alpha=2"], "not a probability"),
])
def test_refusals_before_anything_loads(argv, words):
    with pytest.raises(UserError, match=words):
        ValidateConfig.from_args(_parsed(*argv)).check()
