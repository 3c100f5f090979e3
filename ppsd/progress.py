"""Progress of long commands, for a person at a terminal and for the dashboard. Torch-free.

With PPSD_PROGRESS=jsonl in the environment a command also writes one JSON object a line on
stderr, `{"phase": str, "done": int, "total": int}`; the dashboard (`dashboard/jobs.py`) reads
them back as a live bar. Three ways to produce them:

  * `report(phase, done, total)`: one line, no bar (the simulator's sweeps);
  * `PhaseBars`: a rich bar per named phase, several at once, counted up with `advance()`
    (`ppsd profile`: generation and tracing run interleaved);
  * `SequentialProgress`: one phase after another, the count set with `update(done, total)`,
    messages printed beside the bar with `log()` (`ppsd heads train / eval`).

rich is imported only when a bar is drawn.
"""

from __future__ import annotations

import json
import os
import sys
import time


def jsonl_requested() -> bool:
    """Whether the dashboard (or a user) asked for JSON progress lines."""
    return os.environ.get("PPSD_PROGRESS", "").lower() == "jsonl"


def _write_line(phase: str, done: int, total: int) -> None:
    print(json.dumps({"phase": phase, "done": int(done), "total": int(total)}), file=sys.stderr, flush=True)


def report(phase: str, done: int, total: int) -> None:
    """One `{"phase", "done", "total"}` line on stderr when PPSD_PROGRESS=jsonl; nothing otherwise."""
    if jsonl_requested():
        _write_line(phase, done, total)


class PhaseBars:
    """Rich bars on stderr, one per named phase, and with PPSD_PROGRESS=jsonl also JSON lines.

    JSON lines are throttled to a few a second per phase, but the first and the last line of
    every phase always go out. When stderr is not a terminal (a log file, CI) the bars give way
    to one plain line per finished phase."""

    MIN_INTERVAL_S = 0.25  # between two JSON lines of one phase

    def __init__(self, enabled: bool = True):
        self.jsonl = jsonl_requested()
        self._bar = None
        self._tasks: dict[str, tuple[int, int]] = {}     # phase -> (task id, total)
        self._done: dict[str, int] = {}
        self._last_emit: dict[str, float] = {}
        self._started: dict[str, float] = {}
        self._plain = enabled and not sys.stderr.isatty()
        if enabled and not self._plain:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, \
                TimeElapsedColumn

            self._bar = RichProgress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=Console(stderr=True), transient=False)

    def __enter__(self) -> PhaseBars:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def phase(self, name: str, total: int) -> None:
        """Announce a phase (idempotent); its bar starts at 0 of `total`."""
        if name in self._tasks:
            return
        task = self._bar.add_task(name, total=total) if self._bar is not None else -1
        self._tasks[name] = (task, total)
        self._done[name] = 0
        self._started[name] = time.monotonic()
        self._emit(name, force=True)

    def advance(self, name: str, amount: int = 1) -> None:
        task, total = self._tasks[name]
        before = self._done[name]
        self._done[name] = min(total, self._done[name] + amount)
        if self._plain and before < total <= self._done[name]:
            print(f"{name}: {total}/{total} in {time.monotonic() - self._started[name]:.1f} s",
                  file=sys.stderr, flush=True)
        if self._bar is not None:
            self._bar.update(task, completed=self._done[name])
        self._emit(name, force=self._done[name] >= total)

    def finish(self, name: str) -> None:
        _, total = self._tasks[name]
        self.advance(name, total - self._done[name])

    def _emit(self, name: str, force: bool = False) -> None:
        if not self.jsonl:
            return
        now = time.monotonic()
        if not force and now - self._last_emit.get(name, 0.0) < self.MIN_INTERVAL_S:
            return
        self._last_emit[name] = now
        _write_line(name, self._done[name], self._tasks[name][1])


class SequentialProgress:
    """One phase at a time: a rich bar on the terminal, or with PPSD_PROGRESS=jsonl JSON lines
    instead of it. The caller sets the count (`update(done, total)`), so it can be handed on as a
    plain `progress(done, total)` callback."""

    MIN_INTERVAL_S = 0.5  # between two JSON lines; the first and the last of a phase always go out

    def __init__(self, enabled: bool = True):
        self.jsonl = jsonl_requested()
        self.enabled = enabled
        self._rich = None
        self._task = None
        self._phase = ""
        self._last_emit = 0.0

    def __enter__(self) -> SequentialProgress:
        if self.enabled and not self.jsonl:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, \
                TimeElapsedColumn, TimeRemainingColumn

            self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TimeRemainingColumn(), transient=False)
            self._rich.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.__exit__(*exc)

    def phase(self, name: str, total: int) -> None:
        self._phase = name
        if self._rich is not None:
            self._task = self._rich.add_task(name, total=total)
        self.update(0, total, force=True)

    def update(self, done: int, total: int, force: bool = False) -> None:
        if self._rich is not None and self._task is not None:
            self._rich.update(self._task, completed=done, total=total)
        if self.jsonl:
            now = time.monotonic()
            if force or done >= total or now - self._last_emit > self.MIN_INTERVAL_S:
                self._last_emit = now
                _write_line(self._phase, done, total)

    def log(self, message: str) -> None:
        """A line beside the bar (on the bar's console), or on stderr when there is no bar."""
        if self._rich is not None:
            self._rich.console.print(message)
        elif self.enabled:
            print(message, file=sys.stderr, flush=True)
