"""How a hook says it failed, the way kopf handlers do: retry later, or not until the resource changes."""

from __future__ import annotations

from helm_operator.core.vocabulary import Reason


class HookError(Exception):
    """Base of the errors a hook raises on purpose."""


class TemporaryError(HookError):
    """Try again after ``delay`` seconds (a dependency is not ready, a Job is still running)."""

    def __init__(self, message: str, delay: float = 30.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(HookError):
    """Retrying cannot help until the resource changes (bad input, a failed backup). ``reason``
    is what ``Day2`` and the Warning say (a built-in's own, e.g. ``BackupVerificationFailed``)."""

    def __init__(self, message: str, *, reason: Reason = Reason.HOOK_FAILED) -> None:
        super().__init__(message)
        self.reason = reason


class InvalidSpec(PermanentError):
    """A field of the resource's spec that the hook cannot use; ``path`` is the dotted field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class HookLoadError(Exception):
    """A hook module that cannot be used; raised at start-up, naming the file and function."""
