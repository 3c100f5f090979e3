"""Serving traffic: requests that arrive over time and share a continuously batched engine.

The split follows Vidur's: a request generator (`workload.py`: arrival processes, trace replays, the
requests as entities in `requests.py`), a scheduler (`scheduler.py`: iteration-level continuous batching,
FCFS admission, a token budget per iteration, a stated prefill policy), speculation policies
(`policies/`: what each iteration drafts, from the live batch and the acceptance seen so far), and one
execution-time predictor (the batch cost model, `sim/batch/costs.py`, behind `costs.py`). The metrics
(`metrics.py`) carry `vllm bench serve`'s names: TTFT, TPOT, ITL, E2EL, request and token throughput,
goodput under an SLO.

The scheduler, the policies and the metrics are shared by the simulator and the real serving loop
(`ppsd serve`), so both admit, batch and draft by the same rules and are measured by the same code.

The simulator's side: `engine.py` (the engine as SimPy processes), `acceptance.py` (which trace judges each
request's drafts), `predict.py` (`simulate_serving`, `predict_serving` with 90% intervals), `sweep.py`
(latency against load, the crossover with AR), `planner.py` (`ppsd plan --rate`) and `cli.py`
(`ppsd simulate --serve`). docs/serving.md names the model's terms.
"""
