"""One exception tree. The CLI maps each class to a one-line message and an exit code."""

from __future__ import annotations


class CascadeError(Exception):
    """Base of every error cascade reports to users."""

    exit_code = 1

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def one_line(self) -> str:
        """The message and its fix on one line."""
        text = self.message.rstrip(".")
        return f"{text}. {self.fix}" if self.fix else f"{text}."


def check_name(name: str, what: str, example: str) -> str:
    """A user-supplied name (a session's, a document's) stripped, or an InputError: one line of
    printable characters (no terminal escape sequences, newlines or tabs), 1 to 200 of them."""
    clean = name.strip()
    if not clean or len(clean) > 200 or not clean.isprintable():
        raise InputError(
            f"invalid {what} name {name!r}: use 1 to 200 printable characters on one line",
            f"E.g. {example}.",
        )
    return clean


class Cancelled(Exception):
    """A request was dropped before or while its prompt was decoded (its client left, or the
    server is stopping); nothing was stored half-done."""


class ConfigError(CascadeError):
    """A setting has an invalid value or the config file cannot be read."""

    exit_code = 2


class InputError(CascadeError):
    """A user-supplied file or argument is unusable."""

    exit_code = 2


class ModelError(CascadeError):
    """A model cannot be found, fetched, verified or loaded."""

    exit_code = 3


class DownloadError(ModelError):
    """Fetching a model failed."""


class EngineError(CascadeError):
    """llama.cpp refused an operation."""

    exit_code = 4


class ContextFullError(EngineError):
    """The live window has no room for more tokens."""


class StoreError(CascadeError):
    """The chunk store cannot serve a request."""

    exit_code = 5


class StoreLockedError(StoreError):
    """Another process holds the store."""


class FingerprintMismatchError(StoreError):
    """The store holds KV states made by a different model."""


class CorruptChunkError(StoreError):
    """A stored chunk failed verification; callers recompute it from its tokens."""


class StaleStoreError(StoreError):
    """The store was built by a llama.cpp or payload format this build cannot load."""


class CodecError(StoreError):
    """A KV state blob has a layout the codec does not support."""


class NotFoundError(StoreError):
    """A document, chunk or session does not exist (exit code 6, checked before the model
    loads wherever the store can tell)."""

    exit_code = 6
