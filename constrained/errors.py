"""The exception types of the constrained package: ``ConstraintError`` (the constraint's fault)
and ``CompileUnavailable`` (the server's: a retry may succeed)."""

from __future__ import annotations


class ConstraintError(ValueError):
    """A constraint that cannot be compiled (bad spec, unsupported keyword, timeout).

    ``pointer`` is the JSON pointer of the offending schema node (``#/properties/tags``) and
    ``keyword`` the keyword at fault (``uniqueItems``), when the error comes from a JSON schema.
    """

    def __init__(self, message: str, pointer: str | None = None, keyword: str | None = None) -> None:
        where = ""
        if pointer is not None:
            where = f"{pointer}/{keyword}" if keyword else pointer
            message = f"{message} (at {where})"
        super().__init__(message)
        self.pointer = pointer
        self.keyword = keyword

    def __reduce__(self) -> tuple:
        # Errors cross from compile worker processes: keep the pointer and keyword, and do not
        # append the location to the message a second time.
        return _rebuild, (type(self), str(self), self.pointer, self.keyword)

    @property
    def location(self) -> str | None:
        """``pointer/keyword``, e.g. ``#/properties/tags/uniqueItems``."""
        if self.pointer is None:
            return None
        return f"{self.pointer}/{self.keyword}" if self.keyword else self.pointer


def _rebuild(cls: type, message: str, pointer: str | None, keyword: str | None) -> ConstraintError:
    """Unpickle a ``ConstraintError`` (``message`` already names its location)."""
    err = cls(message)
    err.pointer, err.keyword = pointer, keyword
    return err


class CompileUnavailable(ConstraintError):
    """A compile that failed for a reason of the server's, not the constraint's: its worker process
    died (killed from outside, a crash) or the backend shut down. ``retryable``: the same
    constraint may compile on a later try (a fresh worker serves it); the HTTP layer answers 503."""

    retryable = True
