"""Progress reporting for long head commands: a rich bar on the terminal, and with
PPSD_PROGRESS=jsonl one `{"phase", "done", "total"}` object a line on stderr for the dashboard."""

from __future__ import annotations

import json
import os
import sys
import time


class Progress:
    def __init__(self, enabled: bool = True):
        self.jsonl = os.environ.get("PPSD_PROGRESS") == "jsonl"
        self.enabled = enabled
        self._rich = None
        self._task = None
        self._phase = ""
        self._last_emit = 0.0

    def __enter__(self) -> Progress:
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
            if force or done >= total or now - self._last_emit > 0.5:
                self._last_emit = now
                print(json.dumps({"phase": self._phase, "done": int(done), "total": int(total)}), file=sys.stderr,
                      flush=True)

    def log(self, message: str) -> None:
        if self._rich is not None:
            self._rich.console.print(message)
        elif self.enabled:
            print(message, file=sys.stderr, flush=True)
