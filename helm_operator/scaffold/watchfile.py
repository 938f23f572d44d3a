"""A new entry in a watches file's text, its comments and layout kept: pure, no files.

``init`` writes a commented ``[]``, users write block lists, flow lists or only comments; appending
a block entry after a flow list (``[]``) is invalid YAML. So the entry goes where the file's own
list is: it replaces an empty flow list, joins a non-empty one in flow style, or follows the last
item of a block list at that list's indentation. The result is parsed back and must be exactly
the old entries plus the new one, or nothing is returned but an error saying what to add by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

FRESH_HEADER = "# Which chart serves which custom resource kind; chart paths are relative to this file.\n"


class WatchFileError(ValueError):
    """The entry cannot be added to this text; the message says why and what to add by hand."""


def _block(entry: Mapping[str, Any], indent: int = 0) -> str:
    text = yaml.safe_dump([dict(entry)], sort_keys=False, width=10_000)
    pad = " " * indent
    return "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))


def _flow(entry: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(entry), sort_keys=False, default_flow_style=True, width=10_000).strip()


def _after_line_end(text: str, index: int) -> tuple[str, str]:
    """What follows ``index`` on its line (kept as a comment line when it is one) and the rest."""
    end = text.find("\n", index)
    line, rest = (text[index:], "") if end < 0 else (text[index:end], text[end + 1 :])
    tail = line.strip()
    return (tail + "\n" if tail else ""), rest


def _empty_flow(text: str, node: yaml.SequenceNode, entry: Mapping[str, Any]) -> str:
    """``[]`` (init's) becomes a block list holding the entry, where the ``[]`` was."""
    start, end = node.start_mark.index, node.end_mark.index
    line_start = text.rfind("\n", 0, start) + 1
    before = text[line_start:start]
    tail, rest = _after_line_end(text, end)
    if before.strip():  # e.g. "--- []": the list starts on the next line
        head = text[:start].rstrip(" \t") + "\n"
        return head + _block(entry) + tail + rest
    return text[:line_start] + _block(entry, len(before)) + tail + rest


def _flow_items(text: str, node: yaml.SequenceNode, entry: Mapping[str, Any]) -> str:
    """``[{...}, {...}]``: the entry joins in flow style before the closing bracket."""
    close = node.end_mark.index - 1
    if text[close] != "]":
        raise WatchFileError("the flow list does not end with ']'")
    last = len(text[:close].rstrip())
    separator = " " if text[last - 1] == "," else ", "
    return text[:last] + separator + _flow(entry) + text[last:]


def _block_items(text: str, node: yaml.SequenceNode, entry: Mapping[str, Any]) -> str:
    """A block list: the entry after everything, at the list's own indentation."""
    body = text if text.endswith("\n") else text + "\n"
    return body + "\n" + _block(entry, node.start_mark.column)


def add_entry(text: str, entry: Mapping[str, Any], where: str = "watches.yaml") -> str:
    """``text`` with ``entry`` appended to its list of watches; comments and layout kept.

    Empty text, or only comments, gets a block list; ``where`` names the file in errors.
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        before = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WatchFileError(f"{where}: invalid YAML: {exc}") from None
    if before is None:  # empty, or only comments (and perhaps '---')
        body = text if not text or text.endswith("\n") else text + "\n"
        if not body.strip():
            body = FRESH_HEADER
        new = body + _block(entry)
    elif not isinstance(node, yaml.SequenceNode) or not isinstance(before, list):
        raise WatchFileError(f"{where}: expected a list of watch entries, found {type(before).__name__}")
    else:
        try:
            if node.flow_style and not node.value:
                new = _empty_flow(text, node, entry)
            elif node.flow_style:
                new = _flow_items(text, node, entry)
            else:
                new = _block_items(text, node, entry)
        except WatchFileError as exc:
            raise WatchFileError(f"{where}: {exc}; add this entry by hand:\n{_block(entry)}") from None
    expected = [*(before or []), dict(entry)]
    try:
        after = yaml.safe_load(new)
    except yaml.YAMLError:
        after = None
    if after != expected:
        raise WatchFileError(
            f"{where}: cannot add to its list and keep it; add this entry by hand:\n{_block(entry)}"
        )
    return new


def set_values(text: str, index: int, values: Mapping[str, str], where: str = "watches.yaml") -> str:
    """``text`` with the scalar fields ``values`` of entry ``index`` replaced in place; comments,
    layout and the entry's other fields kept. Every field must be there already."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise WatchFileError(f"{where}: invalid YAML: {exc}") from None
    if not isinstance(root, yaml.SequenceNode) or not 0 <= index < len(root.value):
        raise WatchFileError(f"{where}: no entry {index}")
    entry = root.value[index]
    if not isinstance(entry, yaml.MappingNode):
        raise WatchFileError(f"{where}: entry {index} is not a mapping")
    spans = {
        str(k.value): (v.start_mark.index, v.end_mark.index)
        for k, v in entry.value
        if isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode)
    }
    missing = sorted(set(values) - set(spans))
    if missing:
        raise WatchFileError(f"{where}: entry {index} has no scalar {', '.join(missing)} to change")
    for key in sorted(values, key=lambda k: spans[k][0], reverse=True):
        start, end = spans[key]
        scalar = yaml.safe_dump(values[key], default_flow_style=True).splitlines()[0]
        text = text[:start] + scalar + text[end:]
    return text
