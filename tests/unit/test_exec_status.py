"""What an exec's error channel says: an exit code, or why the command never ran."""

from __future__ import annotations

import json

from websocket import WebSocketBadStatusException

from helm_operator.hooks.kubeclient import exit_status, refused


def test_success_failure_with_a_code_and_a_command_that_never_ran() -> None:
    assert exit_status(json.dumps({"metadata": {}, "status": "Success"})) == (0, "")
    failed = {
        "status": "Failure",
        "message": "command terminated with non-zero exit code: exit status 3",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    assert exit_status(json.dumps(failed)) == (3, failed["message"])
    # What KWOK's fake kubelet (or a node that refuses) answers: no exit code at all.
    refused = {
        "status": "Failure",
        "message": 'error executing command in container: no exec found for container "postgres"',
    }
    assert exit_status(json.dumps(refused)) == (None, refused["message"])
    assert exit_status("")[0] is None
    assert exit_status("not json") == (None, "not json")


def test_a_refused_upgrade_says_its_code_and_the_api_servers_message_in_one_line() -> None:
    body = json.dumps({"kind": "Status", "status": "Failure", "message": 'container not found ("postgres")'})
    headers = {"content-type": "application/json", "audit-id": "5c1f"}
    said = f"Handshake status 500 Internal Server Error -+-+- {headers} -+-+- {body}"  # the library's text
    exc = WebSocketBadStatusException(said, 500, "Internal Server Error", headers, body.encode())
    assert refused(exc) == 'refused (500): container not found ("postgres")'
    bare = WebSocketBadStatusException("Handshake status 403", 403, "Forbidden", {}, b"no json")
    assert refused(bare) == "refused (403)"
    assert refused(ConnectionResetError("reset by peer")) == "reset by peer"
