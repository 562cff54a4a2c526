"""User-facing errors: each carries one line that names what was wrong and what to do."""

from __future__ import annotations


class QucoError(Exception):
    """An error a user can act on; the CLI prints its message on one line, never a traceback."""


class ConfigError(QucoError):
    """A configuration file or value is missing, unreadable or invalid."""


class CapabilityError(QucoError):
    """A method needs a generator capability that the configured backend does not provide."""


class CorpusFormatError(QucoError):
    """A corpus file has a line that cannot be read (bad encoding, bad JSON, missing field)."""


class InputError(QucoError):
    """A question or other direct input is unusable (e.g. empty)."""


class IndexIntegrityError(QucoError):
    """An index on disk is incomplete, damaged, or does not match the corpus it should hold."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name if it has none), for a one-line error."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
