"""The real serving loop: a continuous-batching engine over the batched runtime (`engine.py`), the
OpenAI-compatible HTTP server around it (`server.py`, `ppsd serve`) and a load generator that replays a
workload against any OpenAI-compatible endpoint (`loadgen.py`, `ppsd bench-serve`). The scheduler, the
policies, the workloads and the metrics are the simulator's (`sim/serve/`)."""
