"""One exception tree. Library code raises these; only ``ablate.cli`` turns them into a line and an exit
status."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AblateError(Exception):
    """Base of every error ablate raises on purpose. Its text is shown to the user as one line, after
    ``head`` (``error: ...``)."""

    exit_code = 1
    head = "error"


class UserInputError(AblateError):
    """The user's input was wrong (grid file, option, expression): exit status 2, one line, no traceback."""

    exit_code = 2


class ConfigError(UserInputError):
    """A config or grid field has a wrong value. ``where`` is the file and/or field path."""

    def __init__(self, message: str, *, where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class InputMissingError(ConfigError):
    """What an identity field fingerprints is not here (a data file, a tokenizer): ``updates`` are the fields
    its filler could resolve all the same (a path made absolute)."""

    def __init__(self, message: str, *, where: str | None = None, updates: dict[str, object] | None = None):
        super().__init__(message, where=where)
        self.updates = dict(updates or {})


class StoreError(AblateError):
    """The results store could not do what was asked (unreachable, wrong schema, bad result file)."""


class StoreUnavailableError(StoreError, UserInputError):
    """The store cannot be opened at all (a bad or unsupported URL, a missing driver, a server that does not
    answer, a home that cannot hold it): exit status 2, as for any input that cannot work; nothing ran. (One
    that was open and then went away is a ``StoreUnavailable``.)"""


class NoStoreError(StoreError):
    """A command that reads the store found none where it looked: nothing has run there (or the home or store
    named is not the one meant). Exit status 1, one line naming the store; nothing is created."""


class StoreUnavailable(StoreError):
    """An open store went away: the request was fine, but the database cannot be reached or written now (a
    lost connection, a server that is down, a read-only or full disk), and may take it when it is back. The
    store raises it (``ablate.store.faults``) ``from`` the driver's error; ``ablate.execute.recorder`` decides
    what to do.

    ``where`` is the store's URL (without its password), ``away`` why it is away in the user's words (``full
    (no space left on its disk)`` or ``unreachable``), ``reason`` the driver's own first line.
    """

    FULL, UNREACHABLE = "full (no space left on its disk)", "unreachable"

    def __init__(self, where: str, *, full: bool, reason: str):
        self.where, self.full, self.reason = where, full, reason
        self.away = self.FULL if full else self.UNREACHABLE
        super().__init__(f"the store {where} is {self.away} ({reason})")


class PlanningInterrupted(AblateError):
    """Ctrl-C before anything trained, while a grid was expanded, checked or registered: exit status 130 and
    one plain line. A grid's registration is one transaction, so none of it is left behind."""

    exit_code = 130
    head = ""

    def __init__(self) -> None:
        super().__init__("interrupted while planning; nothing was run")


class RunError(AblateError):
    """A run could not be trained or evaluated."""


class RunInterrupted(RunError):
    """The run was asked to stop; it saved a checkpoint and will resume from it when started again."""


class DiskFullError(RunError):
    """A write failed because its disk is full: the text says "no space left" and names the path
    (``ablate.layout.disk_full``)."""


def did_you_mean(value: object, allowed: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when ``value`` is close to one of ``allowed``, else ``''``.

    >>> did_you_mean("sdpa-elementwize", ["sdpa-elementwise", "baseline"])
    " (did you mean 'sdpa-elementwise'?)"
    """
    close = difflib.get_close_matches(str(value), list(allowed), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def one_of(value: object, allowed: Iterable[str], *, what: str = "value") -> str:
    """A message for a value outside a closed set: what was given, the near match, what is allowed."""
    allowed = sorted(allowed)
    return f"unknown {what} {value!r}{did_you_mean(value, allowed)}; allowed: {', '.join(allowed)}"
