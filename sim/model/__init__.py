"""What a simulated run is priced from, whatever the scheme: the cost model over a profile's tables
(`cost_model`), the acceptance streams (`streams`), the restart rule's race (`restart`), the prefill
(`prefill`), the same-budget comparison (`budget`) and acceptance in the forms papers report
(`acceptance_forms`)."""
