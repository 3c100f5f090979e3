"""Speculation under load: AR and EESD decoding B sequences at once, priced from a profile's batch
tables (`latency.batch`) and replayed over its acceptance traces, one generation per sequence.

`costs.py` prices a pass of B sequences; `replay.py` runs a batch round by round the way the batched
runtime does (`runtime/batched.py`); `sweep.py` ranks plans at a batch size and finds where each scheme
stops paying."""
