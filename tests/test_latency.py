"""profiler/latency.py on CUDA, checked on a CPU with a fake torch.cuda: the step clock records its
events on, and synchronises, its own GPU (not the current one); each worker makes its GPU current
before loading. And a failed pipeline probe keeps the co-run and hop already measured, with the
failure in the profile's warnings (monkeypatched failures, real worker processes for the last)."""

from __future__ import annotations

import contextlib
import json
import queue

import pytest
import torch

from profiler import latency as lat


class _FakeEvent:
    log: list = []

    def __init__(self, enable_timing=False):
        self.device = None

    def record(self, stream=None):
        self.device = stream.device
        _FakeEvent.log.append(("record", str(stream.device), _current[0]))

    def elapsed_time(self, other):
        return 1.5


_current = ["cuda:0"]  # the fake current device


@pytest.fixture
def fake_cuda(monkeypatch):
    log: list = []
    _FakeEvent.log = log
    _current[0] = "cuda:0"

    @contextlib.contextmanager
    def device(d):
        old = _current[0]
        _current[0] = str(torch.device(d))
        try:
            yield
        finally:
            _current[0] = old

    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda d=None: type("S", (), {"device": torch.device(d)})())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: log.append(("synchronize", str(d))))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: int(_current[0].split(":")[1]))
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: log.append(("set_device", str(d))))
    return log


def test_step_clock_records_on_and_synchronises_its_own_gpu(fake_cuda):
    clock = lat.StepClock(torch.device("cuda:1"))  # cuda:0 is current, as in a worker without set_device
    clock.start()
    clock.mark()
    clock.mark()
    assert clock.lap_ms() == [1.5, 1.5]
    assert fake_cuda == [("record", "cuda:1", "cuda:1")] * 3 + [("synchronize", "cuda:1")]


def test_step_clock_names_the_current_gpu_for_a_bare_cuda(fake_cuda):
    _current[0] = "cuda:1"
    assert lat.StepClock(torch.device("cuda")).device == torch.device("cuda:1")


def test_step_clock_on_cpu_is_perf_counter():
    clock = lat.StepClock(torch.device("cpu"))
    clock.start()
    clock.mark()
    laps = clock.lap_ms()
    assert len(laps) == 1 and laps[0] >= 0


def test_worker_makes_its_gpu_current_before_loading(fake_cuda, monkeypatch):
    def load(spec, device="cpu", dtype="float32", *a, **k):
        fake_cuda.append(("load_model", device))
        raise RuntimeError("stop here")

    monkeypatch.setattr("runtime.llm.load_model", load)
    results = queue.Queue()
    lat._worker(1, "tiny-llama", "cuda", "bfloat16", 1, 16, queue.Queue(), results)
    kind, rank, payload = results.get_nowait()
    assert (kind, rank) == ("error", 1) and "stop here" in payload
    assert fake_cuda == [("set_device", "cuda:1"), ("load_model", "cuda:1")]
    assert lat._worker_device(0, "cuda") == "cuda:0" and lat._worker_device(1, "cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert lat._worker_device(1, "cuda") == "cuda:0"  # one GPU: both workers on it (gloo between them)


# --- a failed probe keeps what was measured -------------------------------------------------------------

class _Pool:
    closed = False

    def __init__(self, *a, **k):
        pass

    def close(self):
        _Pool.closed = True


CORUN = {"processes": [1, 2], "slowdown": [1.0, 1.1]}
HOP = {"backend": "gloo", "median_ms": 0.05}


@pytest.fixture
def fake_pool(monkeypatch):
    from runtime.llm import load_model

    monkeypatch.setattr(lat, "WorkerPool", _Pool)
    monkeypatch.setattr(lat, "_measure_corun", lambda pool, cfg, tick: CORUN)
    monkeypatch.setattr(lat, "_measure_hop", lambda pool, cfg, hidden, backend: HOP)
    _Pool.closed = False
    return load_model("tiny-llama")


def _probe_fails(*a, **k):
    raise RuntimeError("worker 1 failed:\nTraceback (most recent call last):\n  ...\nRuntimeError: gloo timed out")


def test_failed_probe_keeps_corun_and_hop_with_a_warning(fake_pool, monkeypatch):
    monkeypatch.setattr(lat, "_measure_pipeline_probe", _probe_fails)
    warnings: list[str] = []
    cfg = lat.LatencyConfig(corun_max=2)
    corun, hop, pipeline = lat.measure_corun_and_hop("tiny-llama", fake_pool, cfg, warnings=warnings)
    assert (corun, hop, pipeline) == (CORUN, HOP, None) and _Pool.closed
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith("pipeline probe failed (worker 1 failed RuntimeError: gloo timed out)")
    assert "kept the co-run slowdown and the idle hop" in warnings[0]
    with pytest.raises(RuntimeError, match="worker 1 failed"):  # without a warnings list: as before
        lat.measure_corun_and_hop("tiny-llama", fake_pool, cfg)


def test_an_unphysical_pipeline_reading_drops_the_probe_and_an_unphysical_corun_refuses(fake_pool, monkeypatch):
    tries = []
    monkeypatch.setattr(lat, "_measure_pipeline_probe",
                        lambda *a, **k: tries.append(1) or {"slowdown": 1.02, "runtime": None, "slowdown_per_stage": [0.9, 1.1]})
    warnings: list[str] = []
    corun, hop, pipeline = lat.measure_corun_and_hop("tiny-llama", fake_pool, lat.LatencyConfig(corun_max=2),
                                                     warnings=warnings)
    assert (corun, hop, pipeline) == (CORUN, HOP, None) and len(tries) == lat.PHYSICAL_TRIES
    assert len(warnings) == 1 and warnings[0].startswith("pipeline probe failed (latency.pipeline.slowdown_per_stage[0] = 0.900")
    # the co-run table is what every plan's stages are priced from: no profile without it
    monkeypatch.setattr(lat, "_measure_corun", lambda pool, cfg, tick: {"processes": [1, 2], "slowdown": [1.0, 0.8]})
    with pytest.raises(lat.UnphysicalReading, match=r"latency.corun.slowdown\[1\] = 0.800 in 3 measurements"):
        lat.measure_corun_and_hop("tiny-llama", fake_pool, lat.LatencyConfig(corun_max=2), warnings=[])


def test_an_unphysical_runtime_probe_is_dropped_with_a_warning():
    from profiler import cli

    class Probe:
        def physical_summary(self):
            raise lat.UnphysicalReading("latency.pipeline.runtime.slowdown = 0.873 in 3 measurements: under 0.95",
                                        "profile again on an idle machine")

    class Steady:
        def physical_summary(self):
            return {"slowdown": 1.1}

    warnings: list[str] = []
    assert cli._runtime_summary(Probe(), warnings) is None
    assert len(warnings) == 1 and warnings[0].startswith("pipeline runtime probe dropped (latency.pipeline.runtime")
    assert "priced from the co-run table" in warnings[0]
    assert cli._runtime_summary(Steady(), warnings) == {"slowdown": 1.1} and len(warnings) == 1


def test_failed_hop_keeps_corun_and_skips_the_probe(fake_pool, monkeypatch):
    probed = []
    monkeypatch.setattr(lat, "_measure_hop", _probe_fails)
    monkeypatch.setattr(lat, "_measure_pipeline_probe", lambda *a, **k: probed.append(1))
    warnings: list[str] = []
    corun, hop, pipeline = lat.measure_corun_and_hop("tiny-llama", fake_pool, lat.LatencyConfig(corun_max=2),
                                                     warnings=warnings)
    assert (corun, hop, pipeline) == (CORUN, None, None) and not probed
    assert warnings[0].startswith("hop measurement failed") and "pipeline probe was skipped" in warnings[0]


@pytest.mark.slow
def test_profile_keeps_corun_and_hop_when_the_probe_fails(tmp_path, monkeypatch):
    """End to end with real worker processes (the probe's failure is injected in the parent)."""
    from ppsd.cli import main
    from ppsd.profile import load_profile

    monkeypatch.setenv("PPSD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lat, "_measure_pipeline_probe", _probe_fails)
    out = tmp_path / "prof"
    assert main(["profile", "--model", "tiny-llama", "--skip-acceptance", "--n-values", "1", "--context-values", "8",
                 "--repeats", "2", "--warmup", "1", "--corun-max", "2", "--out", str(out)]) == 0
    prof = load_profile(out)
    lat_block = prof.meta["latency"]
    assert lat_block["corun"]["processes"] == [1, 2] and lat_block["hop"]["median_ms"] > 0
    pipe = lat_block.get("pipeline") or {}
    assert not pipe.get("stage_bounds") and not pipe.get("hop")  # the worker probe's figures are gone
    if pipe.get("runtime") is None:  # dropped only for a reading that stayed unphysical, and then said
        assert any(w.startswith("pipeline runtime probe dropped") for w in prof.meta["warnings"])
    else:  # the runtime probe (between the grid's rounds) still stands
        assert pipe["runtime"]["slowdown"] > 0
    assert prof.hop_ms() == pytest.approx(lat_block["hop"]["median_ms"])  # the idle hop prices PPSD instead
    warned = [w for w in prof.meta["warnings"] if w.startswith("pipeline probe failed")]
    assert len(warned) == 1 and "gloo timed out" in warned[0]
    assert warned[0] in json.loads((out / "profile.json").read_text())["warnings"]


def test_the_default_grid_measures_every_eesd_verification():
    """γ + 1 for γ = 1..8 is measured, not interpolated (the cost is not smooth in n on a CPU)."""
    from profiler import cli
    from profiler.latency import DEFAULT_N_VALUES, LatencyConfig

    assert set(range(1, 10)) <= set(DEFAULT_N_VALUES) and LatencyConfig().n_values == DEFAULT_N_VALUES
    assert cli.MEASURED_N_VALUES == DEFAULT_N_VALUES


# --- the co-run probe's rounds ---------------------------------------------------------------------------

class _DriftingPool:
    """Workers whose layer takes `alone_ms` alone, `ratio` times that when two run at once, on a machine
    that speeds up by `drift` per round (a worker warming up): the old order (alone first, then
    together) would read ratio x (1 - drift), under 1 for a drift as large as the ratio's excess."""

    def __init__(self, ratio=1.2, alone_ms=2.0, drift=0.2):
        self.ratio, self.alone_ms, self.drift = ratio, alone_ms, drift
        self.rounds: list[tuple[int, ...]] = []
        self._sent: tuple[int, ...] = ()

    def send(self, ranks, cmd):
        assert cmd[0] == "corun"
        self._sent = tuple(ranks)

    def collect(self, kind, ranks):
        self.rounds.append(self._sent)
        warm = 1 - self.drift if len(self.rounds) > 1 else 1.0  # only the first round is cold
        t = self.alone_ms * warm * (self.ratio if len(self._sent) > 1 else 1.0)
        return {r: [t] * 5 for r in self._sent}


def test_corun_probe_times_no_worker_cold_and_brackets_each_together_round():
    pool = _DriftingPool()
    block = lat._measure_corun(pool, lat.LatencyConfig(corun_max=3, corun_seconds=0.1), tick=lambda: None)
    # untimed round of all, then alone / 2 together / alone / 3 together / alone (worker 0, the last, in turn)
    assert pool.rounds == [(0, 1, 2), (0,), (0, 1), (1,), (0, 1, 2), (0,)]
    assert block["slowdown"] == pytest.approx([1.0, 1.2, 1.2]) and block["processes"] == [1, 2, 3]
    assert block["alone_layer_ms"] == pytest.approx(1.6) and len(block["p10"]) == len(block["p90"]) == 3


def test_corun_probe_divides_by_its_neighbouring_alone_rounds():
    class Steady(_DriftingPool):
        def collect(self, kind, ranks):  # alone gets slower round by round: 1, 2, 3 ms
            self.rounds.append(self._sent)
            alone = [s for s in self.rounds[1:] if len(s) == 1]
            if len(self._sent) == 1:
                return {self._sent[0]: [float(len(alone))] * 3}
            return {r: [1.5 * (len(alone) + 0.5)] * 3 for r in self._sent}

    block = lat._measure_corun(Steady(), lat.LatencyConfig(corun_max=3, corun_seconds=0.1), tick=lambda: None)
    assert block["slowdown"] == pytest.approx([1.0, 1.5, 1.5])  # 2.25 / mean(1, 2), 3.75 / mean(2, 3)
