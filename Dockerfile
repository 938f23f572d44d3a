# Rendered by helm_operator/scaffold/deploy.py: `python -m helm_operator.scaffold.deploy` rewrites it.
# docker build -t helm-operator:dev .
# Runs as user 65532 with a read-only root filesystem; watches.yaml, charts/ and hooks/ are in /opt/helm-operator.

# helm from its Go module at the pinned version, with the version stamped in (the operator reads
# `helm version` to choose Helm 4's flags).
FROM golang:1.26 AS helm
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
RUN go install -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v4.3.1 -X helm.sh/helm/v4/internal/version.gitTreeState=clean" helm.sh/helm/v4/cmd/helm@v4.3.1 \
 && /go/bin/helm version --short | grep -q '^v4.3.1'

FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY helm_operator ./helm_operator
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
# Read-only root filesystem: everything written at run time goes to /tmp (an emptyDir).
ENV HOME=/tmp \
    TMPDIR=/tmp \
    HELM_CACHE_HOME=/tmp/helm/cache \
    HELM_CONFIG_HOME=/tmp/helm/config \
    HELM_DATA_HOME=/tmp/helm/data \
    HELM_OPERATOR_HELM=/usr/local/bin/helm \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=helm /go/bin/helm /usr/local/bin/helm
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY watches.yaml /opt/helm-operator/watches.yaml
COPY charts /opt/helm-operator/charts
COPY hooks /opt/helm-operator/hooks
WORKDIR /opt/helm-operator
USER 65532:65532
ENTRYPOINT ["helm-operator", "run", "--watches-file", "/opt/helm-operator/watches.yaml"]
