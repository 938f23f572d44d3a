"""A new watches entry in the file's text: whatever list the file holds, its comments stay."""

from __future__ import annotations

import pytest
import yaml

from helm_operator.scaffold import init
from helm_operator.scaffold.watchfile import WatchFileError, add_entry

ENTRY = {"group": "b.example.com", "version": "v1", "kind": "B", "chart": "charts/b"}
BLOCK = "- group: b.example.com\n  version: v1\n  kind: B\n  chart: charts/b\n"
OLD = {"group": "a.example.com", "version": "v1", "kind": "A", "chart": "charts/a"}


def test_inits_empty_list_becomes_a_block_list_below_its_comments() -> None:
    text = add_entry(init.WATCHES, ENTRY)
    assert text == init.WATCHES.replace("[]\n", BLOCK)
    again = add_entry(text, OLD)
    assert yaml.safe_load(again) == [ENTRY, OLD]
    assert again.startswith(init.WATCHES.replace("[]\n", ""))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "",
            "# Which chart serves which custom resource kind; chart paths are relative to this file.\n"
            + BLOCK,
        ),
        ("# only comments\n#\n", "# only comments\n#\n" + BLOCK),
        ("# no newline at the end", "# no newline at the end\n" + BLOCK),
        ("---\n# empty document\n", "---\n# empty document\n" + BLOCK),
        ("--- []\n", "---\n" + BLOCK),
        ("[]  # none yet\n# the end\n", BLOCK + "# none yet\n# the end\n"),
        ("  []\n", "  " + BLOCK.replace("\n  ", "\n    ")),
        (
            "- {group: a.example.com, version: v1, kind: A, chart: charts/a}  # flow item\n# end\n",
            "- {group: a.example.com, version: v1, kind: A, chart: charts/a}  # flow item\n# end\n\n" + BLOCK,
        ),
        (
            "[{group: a.example.com, version: v1, kind: A, chart: charts/a}]  # one\n",
            "[{group: a.example.com, version: v1, kind: A, chart: charts/a}, "
            "{group: b.example.com, version: v1, kind: B, chart: charts/b}]  # one\n",
        ),
        (
            "[\n  {group: a.example.com, version: v1, kind: A, chart: charts/a},\n]\n",
            "[\n  {group: a.example.com, version: v1, kind: A, chart: charts/a}, "
            "{group: b.example.com, version: v1, kind: B, chart: charts/b}\n]\n",
        ),
        (
            "  - group: a.example.com  # indented list\n    version: v1\n    kind: A\n    chart: charts/a\n",
            "  - group: a.example.com  # indented list\n    version: v1\n    kind: A\n    chart: charts/a\n\n"
            + "".join("  " + line + "\n" for line in BLOCK.splitlines()),
        ),
    ],
)
def test_the_entry_joins_the_files_own_list(text: str, expected: str) -> None:
    out = add_entry(text, ENTRY)
    assert out == expected
    assert yaml.safe_load(out)[-1] == ENTRY


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("watches: []\n", "expected a list of watch entries, found dict"),
        ("[a, b\n", "invalid YAML"),
        ("- a\n---\n- b\n", "invalid YAML"),
        ("- a\n...\n", "add this entry by hand:\n" + BLOCK),
    ],
)
def test_what_cannot_be_joined_says_what_to_add_by_hand(text: str, message: str) -> None:
    with pytest.raises(WatchFileError, match=r"^watches\.yaml: ") as err:
        add_entry(text, ENTRY)
    assert message in str(err.value)
