"""The one error type users see.

Every part raises `UserError(problem, fix)` for bad input; the CLI prints it as one line and
exits with code 2 (no traceback). The dashboard shows the same line as a message.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: names the problem and the fix."""

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem.rstrip(".")
        self.fix = fix.rstrip(".") if fix else None
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"{self.problem}; {self.fix}" if self.fix else self.problem
