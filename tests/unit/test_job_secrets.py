"""Credentials reach a day-2 Job's process through the kubelet (secretKeyRef), never in its text."""

from __future__ import annotations

import pytest

from helm_operator.hooks import SecretKey, jobs
from helm_operator.hooks.builtin.jobs import Script, ScriptError

PRINT = Script('echo "$PGUSER"')


def test_a_secret_becomes_a_secret_key_ref_beside_the_plain_variables() -> None:
    c = jobs.shell(
        "dump", "pg:15", PRINT, env={"PGUSER": "app"}, secrets={"PGPASSWORD": SecretKey("db-auth", "pw")}
    )
    env = c.manifest()["env"]
    assert env == [
        {"name": "PGUSER", "value": "app"},
        {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-auth", "key": "pw"}}},
    ]
    assert "db-auth" not in " ".join(c.argv)


def test_a_secret_must_be_a_secret_key_under_a_valid_name() -> None:
    with pytest.raises(TypeError, match="SecretKey"):
        jobs.command("c", "i:1", ["true"], secrets={"PW": "plain"})  # type: ignore[dict-item]
    with pytest.raises(ScriptError, match="not a valid environment variable"):
        jobs.command("c", "i:1", ["true"], secrets={"BAD=NAME": SecretKey("s", "k")})
