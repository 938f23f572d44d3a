"""The remembered tags of ``core.manifest_yaml`` are the resolver's, the first time and after."""

from __future__ import annotations

import yaml

from helm_operator.core import manifest_yaml

# Scalars YAML 1.1 reads as something other than a string, and strings that look like them.
TRICKY = """
a: yes
b: "yes"
c: off
d: 0x1F
e: 1_000
f: 1e3
g: .inf
h: ~
i: null
j: 2001-12-14
k: 2001-12-14t21:59:43.10-05:00
l: 012
m: '012'
n: 1.0
q: [1, "1", true, 'true', 1.5, -0]
base: &base {x: 1}
merged: {<<: *base, y: 2}
long: %s
""" % ("9" * 100)


def test_loading_twice_reads_what_the_safe_loader_reads() -> None:
    expected = yaml.safe_load(TRICKY)
    for _ in range(2):  # the second read answers from what the first remembered
        assert yaml.load(TRICKY, Loader=manifest_yaml.Loader) == expected


def test_dumping_quotes_what_would_read_back_as_another_type() -> None:
    data = {"on": "on", "n": "1", "t": "true", "z": "0x1F", "d": "2001-12-14", "s": "web", "i": 1}
    for _ in range(2):
        text = yaml.dump(data, Dumper=manifest_yaml.Dumper, sort_keys=False)
        assert text == yaml.dump(data, Dumper=yaml.SafeDumper, sort_keys=False)
        assert yaml.safe_load(text) == data
