"""The ``helm-operator`` command line."""

from helm_operator.cli.main import main

__all__ = ["main"]
