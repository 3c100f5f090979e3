"""ppsd's benchmarks and checks, each run from the project root as `python -m bench.NAME` (`--help`
says how); `python -m bench` (`make bench`) runs the speed benchmarks and prints their headline figures.

    bench_sim          the simulator's speed: `ppsd plan` end to end and a 10k-token event run
    bench_serve_sim    the serving simulator's speed: 10,000 requests of one policy, `ppsd plan --rate`
    bench_dashboard    the What-if planner's response to each control change, cold and warm
    bench_runtime      2-stage PPSD with every draft accepted against AR, and against its stage-time bound
    bench_emulate      PPSD plans on emulated devices: emulated against simulated, and the control plane's cost
    bench_conformance  the PPSD timing model against the runtime on emulated devices, many plans a profile
    machine_check      profile -> validate -> report on this machine, out of sample, in one command
    warmup_check       a short warm-up against a whole one, paired run by run
    ppsd_sitting       one forced-acceptance PPSD sitting taken apart pass by pass
    piece_drift        a decode step's pieces timed now against a profile's prices
    heldout_task       a held-out task (standard-library code completion) as Spec-Bench-format prompts
    hf_check           ppsd's EESD beside transformers' early-exit assisted generation
    hf_calls           transformers' assisted generation timed call by call against the profile's price
    paper_check        the PPSD paper's settings estimated, and LayerSkip's speedups from its acceptance
    published_check    published batch-1 decode figures next to the analytic estimate
    calibrate          the roofline's efficiency factors fitted to a measured GPU profile
    gpu_check          the GPU check's phases (run it through bench/gpu_check.sh)
    gpu_check_env      the environment check gpu_check.sh runs first (imports, pins, carried wheels)
    screenshots        the README's dashboard pictures and their stamp
    serve              the load generator of `ppsd bench-serve`: a workload replayed against an OpenAI-compatible server

Shell scripts beside them: gpu_check.sh (the GPU check on a lent machine), fetch_gpu_wheels.sh (the
wheels it carries), make_example_profile.sh (the committed example profile).
"""
