"""What an exec's error channel says: an exit code, or why the command never ran."""

from __future__ import annotations

import json

from helm_operator.hooks.kubeclient import exit_status


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
