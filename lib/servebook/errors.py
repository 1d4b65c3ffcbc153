"""Errors a user can cause. Each message says what is wrong and what to do.

    try:
        ...
    except servebook.ServebookError as exc:
        print(exc)            # one line, no traceback needed
"""

__all__ = [
    "ServebookError",
    "ParameterError",
    "ResultsError",
    "EngineError",
    "ServerError",
    "ModelError",
]


class ServebookError(Exception):
    """Base class: something the user can fix; ``str(exc)`` says how."""


class ParameterError(ServebookError, ValueError):
    """A book/CLI parameter has an invalid value."""

    def __init__(self, name: str, value, expected: str):
        self.name, self.value, self.expected = name, value, expected
        shown = name if str(name).isprintable() else repr(str(name))[1:-1]  # the message stays one line
        super().__init__(f"parameter '{shown}': invalid value {value!r}; {' '.join(str(expected).splitlines())}")


class ResultsError(ServebookError):
    """The run directory cannot be written or read."""


class EngineError(ServebookError):
    """An engine is missing, fails to import, or rejects what it was asked."""


class ServerError(ServebookError):
    """A server failed to start, died, or did not become ready in time."""

    def __init__(self, message: str, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(message)


class ModelError(ServebookError):
    """A model path or card is wrong."""
