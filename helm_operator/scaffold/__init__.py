"""Project scaffolding: what ``helm-operator init``, ``create-api`` and ``rbac`` write."""
