"""The planner's sweep cache, with background warming (no Streamlit here): Results, per setting.

One trace-driven sweep (`sim.api.sweep`, the exact fast path) of a 30-layer profile takes about
0.3 s at 4 devices and 0.5 s at 8 on this machine (it was 0.6–1 s before sim/model/cost_model.py cached its
interpolation), and the planner must answer a control change in half a second. So:
  * a sweep is cached per (profile, hop, acceptance scale, temperature, exit head); the device
    count only filters it (PPSD plans with k ≤ devices; each plan's result does not depend on how
    many devices exist beyond its own stages), so one sweep at the most devices serves them all;
  * a setting not swept yet is answered at once by `preview` (every plan priced by the closed
    forms, `sim.planner.closed_forms.closed_form_sweep`, ~20 ms) while the worker sweeps exactly that setting
    first; the page reruns when it lands (dashboard/cached.py `plans`, the planner's refresh fragment);
  * after each page run the planner asks `warm()` for the settings one control step away; a
    single worker *process* computes them (a process, so it never holds the server's GIL while a
    page renders) and the results land in the cache as they finish.
Exit layer, draft length and stage count only pick rows, so they never sweep.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

from ppsd.exit_heads import SHARED
from ppsd.paths import PROJECT_ROOT
from sim.plan import Result
from sim.planner.sweep_spec import MAX_DEVICES as MAX_SWEEP_DEVICES
from sim.planner.sweep_spec import SweepSpec

SPEC = SweepSpec()  # `ppsd plan`'s defaults: the planner sweeps as the command line does
MAX_DEVICES = MAX_SWEEP_DEVICES
GAMMAS = SPEC.gammas
TOKENS = SPEC.tokens


@dataclass(frozen=True)
class Key:
    path: str
    stamp: float          # profile.json mtime: a rewritten profile is a new key
    hop_ms: float | None  # None = the profile's measured hop (what `ppsd plan` uses)
    alpha_scale: float = 1.0
    temperature: float = 0.0
    tokens: int = TOKENS
    exit_head: str = SHARED  # which head drafts (profiles made with `ppsd profile --heads` have several)


def within(results: list[Result], devices: int) -> list[Result]:
    """The results whose plan fits on `devices` (PPSD with k ≤ devices; single-stage plans always)."""
    return [r for r in results if r.plan.num_stages <= devices]


@dataclass
class Entry:
    devices: int
    results: list[Result]  # the trace-driven sweep (`sim.api.sweep`), best first
    closed: list[Result]   # the closed forms of the same plans, k = 2..devices

    def for_devices(self, devices: int) -> tuple[list[Result], list[Result]]:
        return within(self.results, devices), within(self.closed, devices)


@lru_cache(maxsize=8)
def profile(path: str, stamp: float):
    from ppsd.profile import load_profile

    return load_profile(path)


def compute(key: Key, devices: int) -> Entry:
    """Run the sweep and the closed forms for one setting (in the server or in the worker)."""
    from sim.api import sweep
    from sim.intervals import attach_sweep_intervals
    from sim.planner.break_even import attach_break_even

    prof = profile(key.path, key.stamp)
    results = sweep(prof, SPEC, devices=devices, hop_ms=key.hop_ms, alpha_scale=key.alpha_scale,
                    temperature=key.temperature, tokens=key.tokens, exit_head=key.exit_head)
    # 90% intervals for a run over the default number of prompts (as `ppsd plan`)
    attach_sweep_intervals(prof, results, alpha_scale=key.alpha_scale, temperature=key.temperature)
    attach_break_even(prof, results)  # the acceptance each plan ties AR at (as `ppsd plan`)
    closed = preview(key, devices)
    for r in results:  # timelines are empty in the fast path; keep pickles small anyway
        r.timeline = []
    return Entry(devices, results, closed)


def preview(key: Key, devices: int) -> list[Result]:
    """Every plan of one setting priced by the closed forms (`sim.planner.closed_forms.closed_form_sweep`): a
    few ms, what the planner shows while the trace-driven sweep of a new setting is still running."""
    from sim.planner import closed_forms as planning

    prof = profile(key.path, key.stamp)
    hop = prof.hop_ms() if key.hop_ms is None else key.hop_ms
    alpha = planning.acceptance_by_exit(prof, key.alpha_scale, key.temperature, head=key.exit_head)
    return planning.closed_form_sweep(prof, alpha, GAMMAS, max(devices, 2), hop, key.exit_head,
                                      key.temperature)


class _Worker:
    """One long-lived `python -c ...worker_main()` subprocess that computes entries on request,
    pickles over its stdin/stdout. A plain subprocess rather than multiprocessing: spawn would
    re-import the server's __main__ (streamlit, pytest), and forking a threaded server is unsafe."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from dashboard.sweep_cache import worker_main; worker_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=PROJECT_ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])})

    def run(self, key: Key, devices: int) -> Entry:
        pickle.dump((key, devices), self.proc.stdin)
        self.proc.stdin.flush()
        status, payload = pickle.load(self.proc.stdout)
        if status != "ok":
            raise RuntimeError(payload)
        return payload

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def worker_main() -> None:
    """The worker's loop: (key, devices) in, ("ok", Entry) or ("error", message) out; ends at EOF."""
    proto_in, proto_out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but pickles on the protocol stream
    while True:
        try:
            key, devices = pickle.load(proto_in)
        except EOFError:
            return
        try:
            reply = ("ok", compute(key, devices))
        except Exception as exc:  # noqa: BLE001 - reported to the server, which recomputes in the foreground
            reply = ("error", f"{exc.__class__.__name__}: {exc}")
        pickle.dump(reply, proto_out)
        proto_out.flush()


class SweepCache:
    def __init__(self, max_entries: int = 128):
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        self._queue: list[tuple[Key, int]] = []  # wanted in the background, in order
        self._running: tuple[Key, int] | None = None
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._worker: _Worker | None = None
        self._max = max_entries
        self.failures = 0
        self.last_error: str | None = None  # the latest warming failure, for whoever asks why

    def _store(self, key: Key, entry: Entry) -> None:
        old = self._entries.get(key)
        if old is None or entry.devices >= old.devices:
            self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def _has(self, key: Key, devices: int) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.devices >= devices

    def cached(self, key: Key, devices: int) -> Entry | None:
        with self._lock:
            return self._entries[key] if self._has(key, devices) else None

    def get(self, key: Key, devices: int) -> Entry:
        """The entry for `key` covering `devices`: from the cache, from the background worker if
        it is computing exactly that now, or computed here."""
        with self._lock:
            deadline = time.time() + 60
            while self._running is not None and self._running[0] == key and self._running[1] >= devices \
                    and time.time() < deadline:
                self._wake.wait(timeout=0.5)
            if self._has(key, devices):
                self._entries.move_to_end(key)
                return self._entries[key]
        entry = compute(key, devices)
        with self._lock:
            self._store(key, entry)
        return entry

    # --- background -----------------------------------------------------------------------
    def warm(self, wanted: list[tuple[Key, int]]) -> None:
        """Compute these settings in the background, in this order, replacing whatever was still
        queued (the user has moved on)."""
        with self._lock:
            self._queue = [(k, d) for k, d in wanted if not self._has(k, d)]
            if self._queue and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._loop, name="ppsd-sweep-warmer", daemon=True)
                self._thread.start()
            self._wake.notify_all()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    if not self._wake.wait(timeout=60):
                        self._thread = None
                        return  # idle for a minute: let the thread end
                key, devices = self._queue.pop(0)
                if self._has(key, devices):
                    continue
                self._running = (key, devices)
            try:
                if self._worker is None or self._worker.proc.poll() is not None:
                    self._worker = _Worker()
                entry = self._worker.run(key, devices)  # blocking pipe I/O: the GIL is free meanwhile
            except Exception as exc:  # noqa: BLE001 - background warming is best effort
                entry = None
                self.failures += 1
                self.last_error = f"{key}: {exc!r}"
                if self._worker is not None:
                    self._worker.close()
                    self._worker = None
            with self._lock:
                if entry is not None:
                    self._store(key, entry)
                self._running = None
                self._wake.notify_all()
            if self.failures > 5:
                return  # something is wrong with the worker; the foreground still works

    def busy(self) -> int:
        with self._lock:
            return len(self._queue) + (self._running is not None)

    def shutdown(self) -> None:
        with self._lock:
            self._queue = []
        if self._worker is not None:
            self._worker.close()
            self._worker = None


CACHE = SweepCache()
atexit.register(CACHE.shutdown)
