"""Timelines as Chrome trace JSON (open in https://ui.perfetto.dev or chrome://tracing).

Shared by the simulator and the runtime so a prediction and a measurement open side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ppsd.paths import atomic_write_json


@dataclass
class Event:
    """One interval on one timeline row (a stage or a device). Times in seconds from run start.

    name: "draft", "verify", "forward", "head", "hop", "flush", "prefill", "idle" ...
    """

    name: str
    row: str
    start_s: float
    dur_s: float
    token: int | None = None
    args: dict = field(default_factory=dict)


def to_chrome_trace(events: list[Event], process_name: str = "ppsd") -> dict:
    """Complete events ("ph": "X"), one thread row per distinct `row`, in first-seen order."""
    rows: dict[str, int] = {}
    for e in events:
        rows.setdefault(e.row, len(rows) + 1)
    trace = [{"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": process_name}}]
    for row, tid in rows.items():
        trace.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name", "args": {"name": row}})
        trace.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    for e in events:
        args = dict(e.args)
        if e.token is not None:
            args["token"] = e.token
        trace.append({
            "ph": "X", "pid": 1, "tid": rows[e.row], "name": e.name, "cat": e.name,
            "ts": round(e.start_s * 1e6, 3), "dur": round(e.dur_s * 1e6, 3), "args": args,
        })
    return {"traceEvents": trace, "displayTimeUnit": "ms"}


def write_chrome_trace(path: str | Path, events: list[Event], process_name: str = "ppsd") -> Path:
    atomic_write_json(path, to_chrome_trace(events, process_name))
    return Path(path)
