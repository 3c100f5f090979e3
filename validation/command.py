"""`ppsd validate`: the command's steps in order. In sample (default): same profile, same model, same
prompts (the profile's own generations), same traces: only the timing model is tested. Out of sample
(`--predict-from DIR`, `--prompts FILE`, `--split F`): the predicting prompts' traces are laid over the
measured prompts' lengths. Writes the validation folder (docs/contracts.md) and prints the table
(`--json`: the document alone on stdout, progress on stderr)."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ppsd import validation_folder as vf
from ppsd.output import print_json
from ppsd.paths import RUNS_DIR, atomic_dir
from validation.config import ValidateConfig
from validation.inputs import load_inputs
from validation.report import drift_warnings, report_lines

if TYPE_CHECKING:  # the measuring modules import torch: the flags and --plans are checked without it
    from validation.measuring import MeasureFn


def validate_command(args) -> int:
    """The CLI's handler: the parsed flags become a ValidateConfig here and go no further."""
    return validate(ValidateConfig.from_args(args))


def measure_function(config: ValidateConfig) -> MeasureFn:
    """The runtime that decodes each plan: ppsd's own (AR / EESD in this process, PPSD in stage
    processes). Another runtime plugs in here with a function of the same signature."""
    if config.runtime == "hf":  # transformers' generate (runtime/hf_assisted.py)
        from runtime.hf_assisted import measure_job

        return measure_job
    from runtime.measure import measure

    return measure


def validate(config: ValidateConfig, measure: MeasureFn | None = None) -> int:
    """Check, load, measure and predict, write the folder, print the report; 0 on success."""
    config.check()  # the flags alone
    inputs = load_inputs(config)  # the profiles and the plans checked, then the model loaded
    import torch

    torch.set_num_threads(1)
    final = Path(config.out) if config.out else RUNS_DIR / f"validation-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    from validation.greedy import GreedyValidation
    from validation.sampled import SampledValidation

    with atomic_dir(final) as out:  # an interrupted validation leaves an earlier folder there intact
        (out / vf.TIMELINES_DIR).mkdir(parents=True, exist_ok=True)
        kind = SampledValidation if inputs.temperature > 0 else GreedyValidation
        doc = kind(config, inputs, out, measure or measure_function(config)).run()
    for line in drift_warnings(doc):
        print(line, file=sys.stderr)
    if config.json:
        print_json(doc)
    else:
        print("\n".join(report_lines(doc, final, config.predict_from)))
    return 0
