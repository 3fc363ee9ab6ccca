"""One error hierarchy for every stage, and the exit status each error means.

A stage raises; `trainwreck.cli` reports the error once, as one line on stderr
(`trainwreck: message`, or `trainwreck <command>: message` for the errors that have always named
their command), and exits with the error's code. Never a traceback for a user error: anything
that is not a TrainwreckError is a bug, reported as an internal error (exit 4).

Exit status, the same for every command:
    0  success, nothing found
    1  problems or findings found (check, compile, diagnose, review; `new` refusing to overwrite)
    2  usage error: bad arguments, a path that names nothing, a missing git ref
    3  no input could be read (diagnose)
    4  internal error (a bug; set TRAINWRECK_DEBUG=1 for the traceback)
  130  interrupted
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_NOTHING_READ = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130


class TrainwreckError(Exception):
    """An error a user can act on: a one-line message, where it is (file:line) when known, and
    the exit status it means."""

    exit_code = EXIT_PROBLEMS
    # Whether the CLI's prefix names the command (`trainwreck check: ...`); kept per class so
    # every message reads exactly as it did before the errors were gathered here.
    names_command = False

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def __str__(self) -> str:
        return self.message

    @property
    def where(self) -> str:
        """`file:line` (or `file`) when known, else ""."""
        if not self.file:
            return ""
        return f"{self.file}:{self.line}" if self.line else self.file

    def report(self, command: str | None = None) -> str:
        """The one line the CLI prints for this error."""
        prefix = f"trainwreck {command}" if command and self.names_command else "trainwreck"
        text = self.message
        if self.where and not text.startswith(self.file or ""):
            text = f"{self.where}: {text}"
        return f"{prefix}: {text}"


class UsageError(TrainwreckError):
    """Bad arguments or input that names nothing: exit 2."""

    exit_code = EXIT_USAGE


class CommandUsageError(UsageError):
    """A usage error reported with the command's name (`trainwreck check: ...`)."""

    names_command = True


class ProblemsFound(TrainwreckError):
    """The command ran and found problems it reports as one line: exit 1."""

    exit_code = EXIT_PROBLEMS


class CommandProblem(ProblemsFound):
    """Problems reported with the command's name (`trainwreck new: refusing to overwrite ...`)."""

    names_command = True


class NothingRead(TrainwreckError):
    """No input could be read at all: exit 3."""

    exit_code = EXIT_NOTHING_READ


class InternalError(TrainwreckError):
    """A bug caught where its context is known (diagnose names the command line): exit 4."""

    exit_code = EXIT_INTERNAL


class BuildError(ProblemsFound):
    """`trainwreck build` stopped: a stage failed (reported as `trainwreck build: ...`)."""

    names_command = True
