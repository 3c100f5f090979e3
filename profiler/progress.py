"""Progress over the phases of a long command: rich bars on stderr, and with PPSD_PROGRESS=jsonl
also one JSON object a line on stderr, `{"phase": str, "done": int, "total": int}` (the dashboard
turns those into a live bar). JSON lines are throttled to a few a second per phase, but the
first and the last line of every phase always go out. When stderr is not a terminal (a log
file, CI) the bars give way to one plain line per finished phase."""

from __future__ import annotations

import json
import os
import sys
import time


class Progress:
    def __init__(self, enabled: bool = True):
        self.jsonl = os.environ.get("PPSD_PROGRESS", "").lower() == "jsonl"
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

    def __enter__(self) -> Progress:
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
        if not force and now - self._last_emit.get(name, 0.0) < 0.25:
            return
        self._last_emit[name] = now
        _, total = self._tasks[name]
        print(json.dumps({"phase": name, "done": self._done[name], "total": total}), file=sys.stderr, flush=True)
