"""Shapes of the spec strings day-2 hooks hand to Jobs: names, S3 buckets and keys, endpoints,
backup locations (pure).

A hook's ``validate`` checks each such field here and says which field and why
(``InvalidSpec``); the chart's ``values.schema.json`` carries the same patterns, so the API server
refuses them first (``tests/unit/test_hook_injection.py`` keeps the two equal). Neither is what
keeps a value from running as code — the Job builders of :mod:`.jobs` do that for any value — but
a bucket named ``bkt$(id)`` is a mistake to be told about at once, not a Job that fails later.
The patterns are in the common subset of Python's and ECMA-262's regular expressions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from helm_operator.hooks.errors import InvalidSpec


@dataclass(frozen=True)
class Shape:
    pattern: str  # anchored, as in values.schema.json
    what: str  # how an error describes it
    max_length: int

    def check(self, value: Any, path: str) -> str:
        """``value`` if it has the shape; ``InvalidSpec`` naming the field and the shape if not."""
        if not isinstance(value, str):
            raise InvalidSpec(path, f"must be a string ({self.what}), not {value!r}")
        if len(value) > self.max_length:
            raise InvalidSpec(path, f"is {len(value)} characters long; at most {self.max_length}")
        if not re.fullmatch(self.pattern, value):  # not match: its $ also matches before a final \n
            raise InvalidSpec(path, f"{value!r} is not {self.what}")
        return value


_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = f"{_LABEL}(\\.{_LABEL})*"
_FILE = "[A-Za-z0-9_][-A-Za-z0-9_.]*"
_KEY = "[A-Za-z0-9_.][-A-Za-z0-9_./]*"
_BUCKET = "[a-z0-9][-a-z0-9.]{1,61}[a-z0-9]"

NAME = Shape(f"^{_SUBDOMAIN}$", "a Kubernetes object name (DNS-1123: a-z, 0-9, '-' and '.')", 253)
BUCKET = Shape(f"^{_BUCKET}$", "an S3 bucket name (3-63 of a-z, 0-9, '.' and '-')", 63)
KEY_PREFIX = Shape("^[-A-Za-z0-9_./]*$", "an S3 key prefix (letters, digits, '-', '_', '.' and '/')", 900)
ENDPOINT = Shape(
    "^https?://([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\\[[0-9A-Fa-f:.]+\\])(:[0-9]{1,5})?(/[-A-Za-z0-9_.~/]*)?$",
    "an http(s) URL of a host, an optional port and path (no query, user or spaces)",
    2048,
)
IMAGE_REPOSITORY = Shape(
    "^[A-Za-z0-9]([-A-Za-z0-9_.:/]*[A-Za-z0-9])?$", "an image repository such as quay.io/coreos/etcd", 255
)
LOCATION = Shape(
    f"^({_LABEL}|pvc://{_SUBDOMAIN}/{_FILE}|s3://{_BUCKET}/{_KEY})$",
    "a backup name, pvc://<claim>/<file> or s3://<bucket>/<key>",
    1024,
)
VOLUME_LOCATION = Shape(
    f"^({_LABEL}|pvc://{_SUBDOMAIN}/{_FILE})$", "a backup name or pvc://<claim>/<file>", 512
)
