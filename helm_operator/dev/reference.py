"""The reference tables of ``docs/`` generated from the code they describe, so a page cannot say
something the code no longer does.

A page holds each table between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; this
module rewrites only what lies between the two (``make docs``, or ``python -m
helm_operator.dev.reference``), and ``tests/unit/test_reference_docs.py`` fails when a page differs
from what the code gives. The tables:

- ``conditions``, ``reasons``: ``core/vocabulary.py`` (the enums and the comments beside them) and
  who owns each condition type (``core/conditions.py``);
- ``metrics``: every ``prometheus_client`` metric defined in the package, found in its source;
- ``watches-fields``: ``config/watches.py``'s ``FIELDS``, the keys the loader accepts;
- ``cli``: the ``helm-operator`` argument parser, every command and option with its help.

It reads every layer to document it, which no other module of ``dev`` does; nothing imports it.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import re
import sys
import tokenize
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import StrEnum
from pathlib import Path

from helm_operator.cli.main import build_parser
from helm_operator.config.watches import FIELDS
from helm_operator.core.conditions import OWNS
from helm_operator.core.vocabulary import ConditionType, Reason
from helm_operator.dev.tools import REPO_ROOT

PACKAGE = REPO_ROOT / "helm_operator"
DOCS = REPO_ROOT / "docs"
BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end generated -->)", re.S)
METRIC_TYPES = ("Counter", "Gauge", "Histogram", "Summary", "Info", "Enum")


def _prose(text: str) -> str:
    """Code text as Markdown on one line: ``x`` as `x`, and ``<name>`` outside code spans shown
    rather than taken for an HTML tag."""
    parts = " ".join(text.split()).replace("``", "`").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def _cell(text: str) -> str:
    """Text that stays in its Markdown table cell."""
    return _prose(text).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _commented_members(enum: type[StrEnum]) -> Iterator[tuple[str, StrEnum, str]]:
    """(section, member, note) of an enum in source order: the section is the last comment line
    above the member, the note the comment that ends the member's own line. Comments exist only in
    the source, so the source is read; a member the reading misses fails loudly rather than drop
    out of a page."""
    source = inspect.getsource(enum)
    (cls,) = (n for n in ast.parse(source).body if isinstance(n, ast.ClassDef))
    members = {
        s.lineno: s.targets[0].id
        for s in cls.body
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)
    }
    comments = {
        t.start[0]: (t.string.lstrip("#").strip(), t.line.lstrip().startswith("#"))
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type == tokenize.COMMENT
    }
    found, section = [], ""
    for line in range(1, (cls.end_lineno or 0) + 1):
        text, alone = comments.get(line, ("", False))
        if alone:
            section = text
        if line in members:
            found.append((section, enum[members[line]], "" if alone else text))
    assert [m for _, m, _ in found] == list(enum), f"{enum.__name__}: members the source reading missed"
    yield from found


def conditions() -> str:
    """Condition types: what each says and which part of the operator sets it."""
    owners = {t: sorted(o.value for o, types in OWNS.items() if t in types) for t in ConditionType}
    rows = [
        (f"`{m}`", note, ", ".join(owners[ConditionType(m)]))
        for _, m, note in _commented_members(ConditionType)
    ]
    return _table(("type", "what it says", "set by"), rows)


def reasons() -> str:
    """The reasons the operator decides itself, grouped as ``core/vocabulary.py`` groups them."""
    groups: dict[str, list[str]] = {}
    for section, m, note in _commented_members(Reason):
        groups.setdefault(section, []).append(f"`{m}`" + (f" ({note})" if note else ""))
    return _table(("where they come from", "reasons"), [(s, ", ".join(r)) for s, r in groups.items()])


def _metric_calls(path: Path) -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    """(name, type, help, labels) of each metric a module defines with ``prometheus_client``."""
    tree = ast.parse(path.read_text())
    kinds = {
        a.asname or a.name: a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "prometheus_client"
        for a in node.names
        if a.name in METRIC_TYPES
    }
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in kinds):
            continue
        args = list(node.args) + [k.value for k in node.keywords if k.arg == "labelnames"]
        name, doc = (a.value if isinstance(a, ast.Constant) else None for a in args[:2])
        labels = args[2] if len(args) > 2 else None
        assert isinstance(name, str) and isinstance(doc, str), (
            f"{path}:{node.lineno}: a metric without literals"
        )
        names = labels.elts if isinstance(labels, ast.List | ast.Tuple) else []
        yield name, kinds[node.func.id].lower(), doc, tuple(str(ast.literal_eval(e)) for e in names)


def metrics() -> str:
    """Every metric the operator serves at ``/metrics``, with its type, labels and help text."""
    rows = [
        (f"`{name}`", kind, ", ".join(labels), doc, f"`{path.relative_to(PACKAGE).as_posix()}`")
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, kind, doc, labels in _metric_calls(path)
    ]
    return _table(("metric", "type", "labels", "what", "defined in"), rows)


def watches_fields() -> str:
    """The keys a watches.yaml entry accepts, from the loader's own table."""
    rows = [
        (
            f"`{f.name}`",
            f.meaning + (f" ([more]({f.see}))" if f.see else ""),
            f.default,
            "Operator SDK" if f.sdk else "helm-operator",
        )
        for f in FIELDS
    ]
    return _table(("field", "meaning", "default", "format"), rows)


def _commands(
    parser: argparse.ArgumentParser, path: str
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(command path, help, parser) of every subcommand, depth first, in the parser's order."""
    for action in parser._actions:  # argparse offers no public walk of its subcommands
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{path} {name}", helps.get(name, ""), sub
                yield from _commands(sub, f"{path} {name}")


def _option(action: argparse.Action) -> tuple[str, str, str]:
    """An argument's spelling, what it does (its help, else its choices) and its default. A
    ``--x/--no-x`` switch's default is the spelling in effect; a default under the home folder is
    written from ``~``; any other absolute path is the machine's, not the command's: left out."""
    spelling = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    said = action.help or ""
    if action.choices and not said:
        said = "one of " + ", ".join(f"`{c}`" for c in action.choices)
    default = action.default
    if isinstance(action, argparse.BooleanOptionalAction) and isinstance(default, bool):
        on, off = action.option_strings[0], action.option_strings[-1]
        return spelling, said, f"`{on if default else off}`"
    home = str(Path.home())
    if isinstance(default, str | Path) and str(default).startswith(home + "/"):
        default = "~" + str(default)[len(home) :]
    if (
        not isinstance(default, str | int | float)
        or isinstance(default, bool)
        or str(default).startswith("/")
        or default == argparse.SUPPRESS
    ):
        return spelling, said, ""
    return spelling, said, f"`{default}`" if default != "" else '`""`'


def cli() -> str:
    """Every ``helm-operator`` command with its help, then each command's arguments."""
    root = build_parser()
    commands = list(_commands(root, "helm-operator"))
    out = [_table(("command", "what it does"), [(f"`{c}`", h) for c, h, _ in commands])]
    for command, _, parser in [("helm-operator", "", root), *commands]:
        rows = [
            _option(a)
            for a in parser._actions
            if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
        ]
        if not rows:
            continue
        out.append(f"### `{command}`")
        if parser.description and parser is not root:
            out.append(_prose(parser.description))
        out.append(_table(("argument", "what it does", "default"), rows))
    return "\n\n".join(out)


TABLES: Mapping[str, Callable[[], str]] = {
    "conditions": conditions,
    "reasons": reasons,
    "metrics": metrics,
    "watches-fields": watches_fields,
    "cli": cli,
}


def render(text: str, where: str = "") -> str:
    """``text`` with every generated block rewritten from the code; the rest stays as it is."""

    def block(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in TABLES:
            raise KeyError(f"{where}: no generated table {name!r}; known: {', '.join(TABLES)}")
        return f"{m.group(1)}\n{TABLES[name]()}\n\n{m.group(4)}"

    return BLOCK.sub(block, text)


def pages(docs: Path = DOCS) -> dict[Path, tuple[str, str]]:
    """Each page with a generated block: (its text now, its text from the code)."""
    out = {}
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text()
        if BLOCK.search(text):
            out[page] = (text, render(text, str(page.relative_to(docs.parent))))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helm_operator.dev.reference", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale = 0
    for page, (now, generated) in pages().items():
        if now == generated:
            continue
        stale += 1
        name = page.relative_to(REPO_ROOT)
        if args.check:
            print(f"{name} is out of date with the code (make docs)")
        else:
            page.write_text(generated)
            print(f"rewrote {name}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
