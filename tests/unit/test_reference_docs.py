"""The docs say what the code does: the tables generated from the code match it, and every relative
link in README.md and docs/ leads to a file, and a heading, that exists."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from helm_operator.dev import reference

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def test_every_generated_table_matches_the_code() -> None:
    stale = [
        f"{page.relative_to(REPO)} is out of date with the code: run `make docs`"
        for page, (now, generated) in reference.pages().items()
        if now != generated
    ]
    assert stale == []


def test_every_table_is_on_a_page() -> None:
    used = {m.group(2) for now, _ in reference.pages().values() for m in reference.BLOCK.finditer(now)}
    assert used == set(reference.TABLES)


def test_only_what_lies_between_the_markers_is_rewritten() -> None:
    text = "before\n<!-- generated: conditions -->\nstale\n<!-- end generated -->\nafter\n"
    out = reference.render(text)
    assert out.startswith("before\n<!-- generated: conditions -->\n\n| type |")
    assert out.endswith("|\n\n<!-- end generated -->\nafter\n") and "stale" not in out
    assert reference.render(out) == out
    with pytest.raises(KeyError, match="no generated table 'nonsense'"):
        reference.render("<!-- generated: nonsense -->\n<!-- end generated -->", "page.md")


def test_the_tables_name_what_the_code_defines() -> None:
    assert "| `ApprovalPending` |" in reference.conditions()
    assert "`BackupVerificationFailed`" in reference.reasons()
    metrics = reference.metrics()
    assert "| `helm_operator_reconciles_total` | counter | watch, action, result |" in metrics
    assert "`helm_operator_conversions_total`" in metrics  # defined outside adapters/metrics.py
    assert "| `maxConcurrentReconciles` |" in reference.watches_fields()
    assert "| `helm-operator rollout pause` |" in reference.cli()


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as '-'."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = 0
        while (f"{slug}-{n}" if n else slug) in found:
            n += 1
        found.add(f"{slug}-{n}" if n else slug)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https://, mailto:
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no such heading in {linked.relative_to(REPO)}")
    assert broken == [], f"{page.relative_to(REPO)}: {broken}"


def test_every_command_line_argument_says_what_it_does() -> None:
    """docs/cli.md is generated from the parser: an argument without help is an empty cell there."""
    rows = [line for line in reference.cli().splitlines() if line.startswith("| `")]
    empty = [row for row in rows if row.split("|")[2].strip() == ""]
    assert rows and empty == []


def test_a_switch_shows_the_spelling_in_effect_and_a_home_path_is_written_from_the_tilde() -> None:
    parser = argparse.ArgumentParser()
    on = parser.add_argument("--real-node", action=argparse.BooleanOptionalAction, default=True, help="h")
    off = parser.add_argument("--keep", action=argparse.BooleanOptionalAction, default=False, help="h")
    cache = parser.add_argument("--cache", default=str(Path.home() / ".cache/x"), help="h")
    machine = parser.add_argument("--socket", default="/run/x.sock", help="h")
    flag = parser.add_argument("--quick", action="store_true", help="h")

    assert reference._option(on)[2] == "`--real-node`"
    assert reference._option(off)[2] == "`--no-keep`"
    assert reference._option(cache)[2] == "`~/.cache/x`"
    assert reference._option(machine)[2] == ""
    assert reference._option(flag)[2] == ""
