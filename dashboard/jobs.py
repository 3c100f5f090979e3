"""Background `ppsd profile` runs started from the dashboard (no Streamlit here).

Profiling imports torch and takes minutes, so it runs as a subprocess with
`PPSD_PROGRESS=jsonl`: besides its normal output it writes `{"phase", "done", "total"}` JSON lines
to stderr. Both streams go to a log file, which the page re-reads on a timer; the file (not a
pipe) means a page reload or a second browser tab still sees the progress.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ppsd.paths import PROJECT_ROOT

# Sizes offered on the page: (label, extra `ppsd profile` arguments, rough time on a 2-core CPU).
SIZES = {
    "quick (4 prompts × 16 tokens)": (["--limit", "4", "--max-new-tokens", "16"], "about a minute"),
    "standard (built-in prompts × 48 tokens)": ([], "about 3 minutes"),
    "thorough (4 prompts per category × 64 tokens)": (["--per-category", "4", "--max-new-tokens", "64"],
                                                      "10 minutes or more"),
}


def profile_command(model: str, device: str, prompts: str | None, size: str, out: Path) -> list[str]:
    """The `ppsd profile` command line for the page's choices."""
    cmd = [sys.executable, "-m", "ppsd", "profile", "--model", model, "--device", device, "--out", str(out)]
    if prompts:
        cmd += ["--prompts", prompts]
    cmd += SIZES[size][0]
    return cmd


@dataclass
class Progress:
    phase: str | None = None
    done: int = 0
    total: int = 0
    log: list[str] = field(default_factory=list)  # non-progress lines, in order

    @property
    def fraction(self) -> float:
        return min(max(self.done / self.total, 0.0), 1.0) if self.total > 0 else 0.0


def parse_log(text: str) -> Progress:
    """Split a log into the latest progress record and the human-readable lines."""
    prog = Progress()
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("{") and '"phase"' in s:
            try:
                obj = json.loads(s)
                prog.phase = str(obj.get("phase"))
                prog.done = int(obj.get("done") or 0)
                prog.total = int(obj.get("total") or 0)
                continue
            except (json.JSONDecodeError, TypeError, ValueError):
                pass
        if s:
            prog.log.append(line.rstrip())
    return prog


def error_line(log_lines: list[str], returncode: int) -> str:
    """The one line to show when the run failed: the CLI's `ppsd profile: error: ...` line when
    there is one (a UserError), else the last line of output (e.g. an exception's message)."""
    for line in reversed(log_lines):
        if ": error: " in line:
            return line.strip()
    for line in reversed(log_lines):
        if line.strip() and not line.startswith(" "):
            return line.strip()
    return f"ppsd profile exited with code {returncode} and no output"


@dataclass
class Job:
    cmd: list[str]
    out: Path
    log_path: Path
    proc: subprocess.Popen
    started: float = field(default_factory=time.time)

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def progress(self) -> Progress:
        try:
            return parse_log(self.log_path.read_text(errors="replace"))
        except FileNotFoundError:
            return Progress()

    def stop(self) -> None:
        """End this run: the subprocess and the stage workers it started (its own session)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start(cmd: list[str], out: Path, log_dir: Path) -> Job:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{out.name}.log"
    env = {**os.environ, "PPSD_PROGRESS": "jsonl", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    with open(log_path, "w") as log:
        # own session: stopping the run ends its whole process group and nothing else
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=PROJECT_ROOT, start_new_session=True)
    return Job(cmd=cmd, out=out, log_path=log_path, proc=proc)
