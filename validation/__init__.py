"""`ppsd validate`: measure plans for real and lay them beside the simulator's prediction.

One job a module, in the order a validation runs:

    config.py     ValidateConfig: the command's settings, built once from the CLI, checked before any load
    plan_spec.py  `--plans` items (plan, exit head, forced acceptance) and the default set
    prompts.py    Sides: which prompts predict and which are measured (in or out of sample)
    inputs.py     Inputs: the profiles, the model, the measured prompts and the plans, checked
    forcing.py    what forces a plan's acceptance: `alpha=A` bits, replayed traces
    machine.py    checks of the machine taken during the bench: the co-run check, `--retime`
    measuring.py  the one measuring loop: AR measured around each plan, greedy rounds and sampled seeds
                  alike; `MeasureFn` is where another runtime plugs in
    predictor.py  the simulator's figures for the measured prompts (greedy and sampled)
    statistics.py what the runs add up to: median rounds, seeds' spread, acceptance errors
    greedy.py     rows and document of a greedy validation
    sampled.py    rows and document of a sampled validation (`--temperature T`)
    report.py     the table and summary lines printed after the run
    command.py    validate_command(args): the steps above, in order

The folder format itself (validation.json, validation.csv, timelines/) is `ppsd/validation_folder.py`:
torch-free, because the dashboard reads it.
"""
