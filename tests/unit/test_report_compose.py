"""``Reporter.compose``: a status written outside the release's lock is composed on the resource as
it is at the write, under its resourceVersion, and composed again when another writer came first."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.client.exceptions import ApiException

from helm_operator.adapters.kube import ObjectRef
from helm_operator.adapters.report import Reporter

REF = ObjectRef("test.helm-operator.io/v1", "Hooked", "a", "ns")


class _Kube:
    """Two writers: the reconcile writes Ready (resourceVersion 2) between the first read and
    the first write; ``gone``: the resource is deleted instead."""

    def __init__(self, gone: bool = False) -> None:
        self.version, self.gone, self.written = 1, gone, []
        self.conditions: list[dict[str, Any]] = [{"type": "Ready", "status": "False"}]

    def get_custom(self, ref: ObjectRef, plural: str) -> dict[str, Any] | None:
        if self.gone and self.version > 1:
            return None
        body = {
            "metadata": {"resourceVersion": str(self.version)},
            "status": {"conditions": list(self.conditions)},
        }
        if self.version == 1:  # the reconcile's write lands right after this read
            self.version, self.conditions = 2, [{"type": "Ready", "status": "True"}]
        return body

    def patch_status(
        self, ref: ObjectRef, plural: str, status: Any, resource_version: str | None = None
    ) -> None:
        if resource_version != str(self.version):
            raise ApiException(status=409, reason="Conflict")
        self.written.append((resource_version, status))


def _day2_beside(body: dict[str, Any]) -> dict[str, Any]:
    """What a hook beside Helm writes: Day2, on the conditions it is given."""
    return {"conditions": [*body["status"]["conditions"], {"type": "Day2", "status": "False"}]}


def test_a_conflict_composes_again_on_what_the_other_writer_wrote() -> None:
    kube = _Kube()
    assert asyncio.run(Reporter(kube).compose(REF, "hookeds", _day2_beside))  # type: ignore[arg-type]
    assert kube.written == [
        ("2", {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Day2", "status": "False"}]})
    ]


def test_a_resource_gone_meanwhile_is_nothing_to_write() -> None:
    kube = _Kube(gone=True)
    assert not asyncio.run(Reporter(kube).compose(REF, "hookeds", _day2_beside))  # type: ignore[arg-type]
    assert kube.written == []


def test_nothing_to_say_writes_nothing() -> None:
    kube = _Kube()
    assert asyncio.run(Reporter(kube).compose(REF, "hookeds", lambda body: None))  # type: ignore[arg-type]
    assert kube.written == []


class _Counting(_Kube):
    """No writer between the caller's read and the write (``stale``: the reconcile wrote since)."""

    def __init__(self, stale: bool = False) -> None:
        super().__init__()
        self.reads = 0
        if stale:
            self.version, self.conditions = 2, [{"type": "Ready", "status": "True"}]

    def get_custom(self, ref: ObjectRef, plural: str) -> dict[str, Any] | None:
        self.reads += 1
        return {
            "metadata": {"resourceVersion": str(self.version)},
            "status": {"conditions": list(self.conditions)},
        }


_READ = {
    "metadata": {"resourceVersion": "1"},
    "status": {"conditions": [{"type": "Ready", "status": "False"}]},
}


def test_a_body_the_caller_just_read_is_composed_on_without_reading_it_again() -> None:
    kube = _Counting()
    assert asyncio.run(Reporter(kube).compose(REF, "hookeds", _day2_beside, read=_READ))  # type: ignore[arg-type]
    assert kube.reads == 0
    assert kube.written == [
        ("1", {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Day2", "status": "False"}]})
    ]


def test_a_body_read_before_another_writer_costs_one_read_and_never_undoes_that_write() -> None:
    kube = _Counting(stale=True)
    assert asyncio.run(Reporter(kube).compose(REF, "hookeds", _day2_beside, read=_READ))  # type: ignore[arg-type]
    assert kube.reads == 1
    assert kube.written == [
        ("2", {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Day2", "status": "False"}]})
    ]
