"""Containers of day-2 Jobs, built so that no value ever becomes code (pure).

Every value a hook puts into a Job — a spec field, the resource's name, a backup's name or
location, an action's argument — reaches the container's process as one argv element or one
environment variable, never as text of a shell script:

- :func:`command` execs an argv as it is (no shell) and refuses to start a shell on a text;
- :func:`shell` runs a :class:`Script`, a constant declared at a module's top level (so it cannot
  be formatted from a resource) and checked when declared: every expansion double-quoted
  (``"$NAME"``, ``"$@"``), no command substitution. Values go in as ``env`` and ``args``.

The kubelet expands ``$(NAME)`` in command, args and env values; every string is escaped (a
``$`` before ``$`` or ``(`` doubled) so the process sees it verbatim. ``backup.job`` takes only
:class:`Container` values, and the builtins that run a Job refuse one that starts a shell on any
other text (:func:`check`), so formatting a value into a script fails in a hook's unit test, not
in a tenant's namespace. The same holds for other interpreters (``python -c``, ``psql -c``): pass
values as arguments or variables, never in the code.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

SHELLS = frozenset({"sh", "bash", "ash", "dash", "ksh", "mksh", "zsh"})
_SPECIAL = "?#$!-"  # parameters whose value is a number or flags: safe unquoted
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")  # what the API server accepts
_declared: set[str] = set()  # texts of every Script declared (what check() accepts)


@dataclass(frozen=True)
class SecretKey:
    """One key of a Secret in the resource's namespace: a credential reaches a Job's process as an
    environment variable the kubelet fills in (``secretKeyRef``), never in the Job's own text."""

    secret: str
    key: str


class ScriptError(ValueError):
    """A script or a container that would let a value become shell code."""


def lint(text: str) -> list[str]:
    """What makes ``text`` unfit for a :class:`Script`: unquoted expansions (word-split and
    globbed), command substitution (where an injected value would run), unbalanced quotes."""
    problems: list[str] = []

    def problem(what: str) -> None:
        problems.append(f"line {text.count(chr(10), 0, i) + 1}: {what}")

    quote = ""  # "", "'" or '"'
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            i += 1  # the next character is literal
        elif c == "#" and not quote and (i == 0 or text[i - 1] in " \t\n;&|()"):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c in "'\"" and (not quote or c == quote):
            quote = "" if quote else c
        elif c == "`":
            problem("command substitution (`…`)")
        elif c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "(":
                problem("command substitution or arithmetic ($(…))")
            elif nxt in _SPECIAL:
                i += 1
            elif nxt == "{":
                end = text.find("}", i)
                inner = text[i + 2 : end] if end > 0 else ""
                name = _NAME.match(inner) or re.match(r"[0-9@*#?]", inner)
                if end < 0 or not name or any(ch in inner for ch in "$`'\"\\"):
                    problem(f"${{…}} must name one variable: {text[i : end + 1]!r}")
                elif quote != '"' and not inner.startswith("#"):
                    problem(f'unquoted expansion {text[i : end + 1]} (write "{text[i : end + 1]}")')
                i = max(end, i)
            elif nxt in "@*" or nxt.isdigit() or _NAME.match(nxt):
                name_at = _NAME.match(text, i + 1)
                word = "$" + (name_at.group() if name_at else nxt)
                if quote != '"':
                    problem(f'unquoted expansion {word} (write "{word}")')
                i += len(word) - 1
        i += 1
    if quote:
        problems.append(f"unbalanced {quote} quote")
    return list(dict.fromkeys(problems))


class Script:
    """A shell script that is a constant: declared at a module's top level, given values only as
    environment variables (``"$NAME"``) and positional arguments (``"$@"``, ``"$1"``)::

        PRUNE = Script('for url in "$@"; do aws s3 rm "$url"; done')
        jobs.shell("prune", AWS_CLI, PRUNE, args=urls)
    """

    __slots__ = ("shell", "text")

    def __init__(self, text: LiteralString, *, shell: str = "/bin/sh") -> None:
        problems = lint(text)
        if problems:
            raise ScriptError(f"not a safe script: {'; '.join(problems)}")
        where = sys._getframe(1).f_code.co_name
        if where != "<module>":
            raise ScriptError(
                f"declare a Script at a module's top level, not in {where}(): a script made per call "
                "is one a value can be formatted into; pass values as env or args"
            )
        self.text: str = text
        self.shell = shell
        _declared.add(text)

    def __repr__(self) -> str:
        return f"Script({self.text!r})"


def declared(text: str) -> bool:
    """Whether ``text`` is the text of a declared :class:`Script`."""
    return text in _declared


_KUBELET = re.compile(r"\$(?=[$(])")  # the kubelet reads "$$" as "$" and "$(NAME)" as a variable


def escape(value: str) -> str:
    """``value`` as the kubelet passes it on verbatim: each ``$`` it would read doubled."""
    return _KUBELET.sub("$$", value)


def unescape(value: str) -> str:
    return value.replace("$$", "$")


@dataclass(frozen=True)
class Container:
    """One container of a day-2 Job: an argv that is exec'd (no shell on a text unless it is a
    declared :class:`Script`), its environment and its volume mounts."""

    name: str
    image: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()  # (volume, mountPath)
    secrets: tuple[tuple[str, SecretKey], ...] = ()  # (variable, where its value is kept)

    def manifest(self) -> dict[str, Any]:
        """The Kubernetes container, every string escaped for the kubelet's ``$(NAME)``."""
        out: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "command": [escape(a) for a in self.argv],
        }
        env: list[dict[str, Any]] = [{"name": k, "value": escape(v)} for k, v in self.env]
        env += [
            {"name": k, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
            for k, ref in self.secrets
        ]
        if env:
            out["env"] = env
        if self.mounts:
            out["volumeMounts"] = [{"name": v, "mountPath": p} for v, p in self.mounts]
        return out


def _pairs(values: Mapping[str, str] | None, what: str) -> tuple[tuple[str, str], ...]:
    out = tuple((values or {}).items())
    for k, v in out:
        if not isinstance(v, str) or not isinstance(k, str):
            raise TypeError(f"{what} {k!r}: give a string, not {type(v).__name__}")
    return out


def _container(
    name: str,
    image: str,
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    mounts: Mapping[str, str] | None,
    secrets: Mapping[str, SecretKey] | None = None,
) -> Container:
    for key in [k for k, _ in _pairs(env, "env")] + list(secrets or {}):
        if not _ENV_NAME.match(key):
            raise ScriptError(f"{key!r} is not a valid environment variable name")
    for key, ref in (secrets or {}).items():
        if not isinstance(ref, SecretKey):
            raise TypeError(f"secret {key!r}: give a SecretKey, not {type(ref).__name__}")
    if any(not isinstance(a, str) for a in argv):
        raise TypeError(f"argv of {name}: every element must be a string")
    return Container(
        name, image, tuple(argv), _pairs(env, "env"), _pairs(mounts, "mount"), tuple((secrets or {}).items())
    )


def shell_text(argv: Sequence[str]) -> str | None:
    """The text a shell would run as code if ``argv`` starts one with ``-c``; None otherwise."""
    args = list(argv)
    if args and args[0].rsplit("/", 1)[-1] == "busybox":
        args = args[1:]
    if not args or args[0].rsplit("/", 1)[-1] not in SHELLS:
        return None
    code, rest = False, iter(args[1:])
    for a in rest:
        if a == "--":
            return next(rest, "") if code else None
        if a in ("-o", "+o"):
            next(rest, None)
        elif a[:1] in "-+" and len(a) > 1:
            code = code or (a[0] == "-" and "c" in a[1:])
        else:
            return a if code else None
    return "" if code else None


def command(
    name: str,
    image: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    mounts: Mapping[str, str] | None = None,
    secrets: Mapping[str, SecretKey] | None = None,
) -> Container:
    """A container that execs ``argv`` as it is: every element one argument, never parsed;
    ``secrets`` are variables read from Secrets (credentials)."""
    if shell_text(argv) is not None:
        raise ScriptError(f"{name}: {argv[0]} -c runs a text as code; use shell() with a Script")
    return _container(name, image, argv, env, mounts, secrets)


def shell(
    name: str,
    image: str,
    script: Script,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    mounts: Mapping[str, str] | None = None,
    secrets: Mapping[str, SecretKey] | None = None,
) -> Container:
    """A container that runs a declared :class:`Script` (``-e``: the first failure stops it);
    ``args`` are its ``"$@"``, ``env`` its variables and ``secrets`` variables read from Secrets —
    data, never code."""
    if not isinstance(script, Script):
        kind = type(script).__name__
        raise ScriptError(f"{name}: give a Script declared at a module's top level, not a {kind}")
    return _container(name, image, [script.shell, "-ec", script.text, name, *args], env, mounts, secrets)


def _containers(obj: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    """The containers of a Job, a CronJob's Job or a Pod."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    pod = spec if obj.get("kind") == "Pod" else (spec.get("template") or {}).get("spec") or {}
    yield from pod.get("initContainers") or ()
    yield from pod.get("containers") or ()


RUNS_CONTAINERS = frozenset({"Job", "CronJob", "Pod"})  # what ctx.kube.create checks with check()


def check(job: Mapping[str, Any]) -> None:
    """Refuse a Job with a container that starts a shell on a text that is not a declared
    :class:`Script` (a script formatted from values, the class of bug this module prevents)."""
    for c in _containers(job):
        text = shell_text([*(c.get("command") or ()), *(c.get("args") or ())])
        if text is not None and not (declared(text) or declared(unescape(text))):
            raise ScriptError(
                f"Job {job.get('metadata', {}).get('name')!r}, container {c.get('name')!r}: its shell "
                "script is not a declared Script (values must go in as env or args, not into the text)"
            )
