"""helm-operator: turn plain Helm charts into Kubernetes operators."""

__version__ = "0.1.0"
