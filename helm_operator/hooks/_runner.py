"""Run one hook: within its timeout, its errors turned into a result (retry later or permanent).

Whatever the hook wrote to ``ctx.day2`` is saved when it ends, also when it fails, so a record
such as a failed backup's is not lost.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from dataclasses import dataclass

from helm_operator.core.vocabulary import Reason
from helm_operator.hooks.context import Context
from helm_operator.hooks.errors import InvalidSpec, PermanentError, TemporaryError
from helm_operator.hooks.registry import Hook

log = logging.getLogger(__name__)

RETRY_DEFAULT = 30.0  # seconds before a hook that raised an unexpected exception is tried again


@dataclass(frozen=True)
class HookResult:
    ok: bool
    reason: Reason = Reason.HOOKS_SUCCEEDED  # not ok: HOOK_FAILED, HOOK_TIMED_OUT, HOOK_RETRYING, …
    message: str = ""
    retry_after: float | None = None  # None with ok=False: permanent, until the resource changes
    field: str | None = None  # InvalidSpec: the dotted spec field at fault
    detail: str = ""  # the error in its own words, without the hook's name
    wait: bool = False  # TemporaryError: not a failure, the hook asked to be called again later

    @property
    def waiting(self) -> bool:
        """Not a failure: the hook asked to be called again (``TemporaryError``)."""
        return self.wait

    @property
    def problem(self) -> tuple[Reason, str] | None:
        """What the ``Day2`` condition is told: (reason, message) of a failure, None otherwise."""
        return None if self.ok or self.waiting else (self.reason, self.message)

    @property
    def permanent(self) -> bool:
        return not self.ok and self.retry_after is None


OK = HookResult(True)


def _origin(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""


async def run(hook: Hook, ctx: Context) -> HookResult:
    loop = asyncio.get_running_loop()
    ctx.deadline = loop.time() + hook.timeout
    try:
        await asyncio.wait_for(hook.fn(ctx), hook.timeout)
        result = OK
    except TimeoutError:
        result = HookResult(
            False,
            Reason.HOOK_TIMED_OUT,
            f"{hook.label} did not finish within {hook.timeout:g}s and was cancelled",
            60.0,
        )
    except TemporaryError as exc:
        result = HookResult(False, Reason.HOOK_RETRYING, f"{hook.label}: {exc}", exc.delay, wait=True)
    except InvalidSpec as exc:
        result = HookResult(
            False, Reason.INVALID_SPEC, f"{hook.label}: {exc}", field=exc.path, detail=str(exc)
        )
    except PermanentError as exc:
        result = HookResult(False, exc.reason, f"{hook.label}: {exc}", detail=str(exc))
    except Exception as exc:
        ctx.log.warning("%s raised", hook.label, exc_info=True)
        message = f"{hook.label} raised {type(exc).__name__}: {exc}{_origin(exc)}"
        result = HookResult(False, Reason.HOOK_FAILED, message, RETRY_DEFAULT)
    try:
        await ctx.day2.save()
    except Exception as exc:  # the resource went away or the API server is unreachable
        ctx.log.warning("could not save status.day2 after %s: %s", hook.label, exc)
    return result
