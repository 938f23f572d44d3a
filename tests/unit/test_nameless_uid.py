"""The operator runs as a uid the password database does not know (the image's 65532, or any
``runAsUser`` a cluster picks): nothing on its way up asks for the user's name."""

from __future__ import annotations

import os
import pwd
import socket

import pytest
from kopf._core.engines import peering

from helm_operator.runtime.app import kopf_identity
from helm_operator.runtime.leader import LeaderSettings


@pytest.fixture
def nameless(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME", "POD_ID"):
        monkeypatch.delenv(name, raising=False)


def test_kopf_is_told_its_identity_instead_of_guessing_it(nameless: None) -> None:
    with pytest.raises(KeyError):  # kopf's own guess: what stopped the operator in its image
        peering.detect_own_id(manual=False)
    leader = LeaderSettings(namespace="ns")
    assert kopf_identity(leader) == leader.identity  # the name the Lease shows
    assert kopf_identity(None) == f"{socket.gethostname()}/{os.getpid()}"
