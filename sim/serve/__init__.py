"""Serving traffic: requests that arrive over time and share a continuously batched engine.

The split follows Vidur's: a request generator (`workload.py`: arrival processes, trace replays, the
requests as entities in `requests.py`), a scheduler (`scheduler.py`: iteration-level continuous batching,
FCFS admission, a token budget per iteration, a stated prefill policy), speculation policies
(`policies.py`: what each iteration drafts, from the live batch and the acceptance seen so far), and one
execution-time predictor (the batch cost model, `sim/batch/costs.py`). The metrics (`metrics.py`) carry
`vllm bench serve`'s names: TTFT, TPOT, ITL, E2EL, request and token throughput, goodput under an SLO.

The scheduler, the policies and the metrics are shared by the simulator and the real serving loop
(`ppsd serve`), so both admit, batch and draft by the same rules and are measured by the same code.
"""
