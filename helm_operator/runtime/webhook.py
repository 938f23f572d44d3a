"""The conversion webhook every replica serves (leader or not, any shard): HTTPS on its own
threads, so a standby waiting for its lease answers the API server as the leader does.

Its certificate comes from a Secret the replicas share: the first to start makes a private CA and
a serving certificate signed by it; any replica renews the serving certificate (and, near its end,
the CA) ``ROTATE_BEFORE`` its expiry, and every replica reloads what the Secret holds every
``RELOAD_EVERY`` seconds. The leader writes the CA into the ``caBundle`` of each converted kind's
CRD, with the Service (in a cluster) or the loopback URL (the local control plane) to call, and
into a ValidatingWebhookConfiguration through which the same server refuses a write that could
not be read back in every served version.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter, Gauge, Histogram

from helm_operator.adapters import certs
from helm_operator.core.naming import READABLE_WEBHOOK
from helm_operator.hooks.conversion import Kind, admission, review

log = logging.getLogger(__name__)

ROTATE_BEFORE = dt.timedelta(days=30)
RELOAD_EVERY = 300.0
PATH = "/convert"
CHECK_PATH = "/readable"  # the validating webhook: a write is refused when it could not be read back
MAX_BODY = 32 * 1024 * 1024  # the API server sends at most a list's worth of objects

CONVERSIONS = Counter(
    "helm_operator_conversions_total",
    "Objects converted by the conversion webhook, by kind and result (Success, Failure)",
    ["kind", "result"],
)
UNREADABLE = Counter(
    "helm_operator_conversion_writes_refused_total",
    "Writes of a converted kind refused because the object could not be read back in every served version",
    ["kind"],
)
REACHABLE = Gauge(
    "helm_operator_conversion_webhook_reachable",
    "1 while the API server reaches the conversion webhook for a kind (a read that needs a "
    "conversion succeeds), 0 while it does not",
    ["crd"],
)
CHECK_EVERY = 10.0  # seconds between the leader's reads through the webhook
CONVERSION_SECONDS = Histogram(
    "helm_operator_conversion_seconds",
    "Time to answer one ConversionReview (all its objects)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)


@dataclass(frozen=True)
class WebhookSettings:
    bind: tuple[str, int]
    secret_namespace: str
    secret_name: str = "helm-operator-conversion"
    service: tuple[str, str, int] | None = None  # namespace, name, port: in a cluster; None: a URL

    def names(self) -> list[str]:
        """What the serving certificate is for: the Service's DNS names, loopback, the bind host."""
        out = []
        if self.service:
            ns, name, _ = self.service
            out += [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}"]
        host = self.bind[0]
        out += ["localhost", "127.0.0.1"] + ([host] if host not in ("", "0.0.0.0", "::", "127.0.0.1") else [])
        return out

    def client_config(self, bundle: bytes, path: str = PATH) -> dict[str, Any]:
        """A webhook's ``clientConfig`` (merge patch: the unused form is removed)."""
        ca = base64.b64encode(bundle).decode()
        if self.service:
            ns, name, port = self.service
            return {
                "service": {"namespace": ns, "name": name, "port": port, "path": path},
                "url": None,
                "caBundle": ca,
            }
        host = self.bind[0] if self.bind[0] not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return {"url": f"https://{host}:{self.bind[1]}{path}", "service": None, "caBundle": ca}


@dataclass(frozen=True)
class Material:
    ca: certs.Pair
    serving: certs.Pair
    bundle: bytes  # the CA certificates the API server trusts (during a CA rotation: old and new)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _read(secret: Any) -> Material | None:
    data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
    if not all(k in data for k in ("ca.crt", "ca.key", "tls.crt", "tls.key")):
        return None
    bundle = data.get("ca-bundle.crt", data["ca.crt"])
    return Material(
        certs.Pair(data["ca.crt"], data["ca.key"]), certs.Pair(data["tls.crt"], data["tls.key"]), bundle
    )


def _renewed(old: Material | None, names: Sequence[str], now: dt.datetime) -> Material | None:
    """New material when ``old`` is missing or due (None: ``old`` serves on)."""
    if old is None:
        ca = certs.new_ca("helm-operator conversion CA", now)
        return Material(ca, certs.new_serving(ca, names, now), ca.cert)
    ca, bundle = old.ca, old.bundle
    if certs.not_after(ca.cert) - now < ROTATE_BEFORE:  # the new CA is trusted beside the old
        ca = certs.new_ca("helm-operator conversion CA", now)
        bundle = ca.cert + old.ca.cert
    due = certs.not_after(old.serving.cert) - now < ROTATE_BEFORE
    if ca is old.ca and not due and set(names) <= certs.names_of(old.serving.cert):
        return None
    return Material(ca, certs.new_serving(ca, names, now), bundle)


def material(core: client.CoreV1Api, s: WebhookSettings, now: dt.datetime | None = None) -> Material:
    """The Secret's certificates, made or renewed when due (replicas racing: the first write wins,
    the others read it)."""
    now = now or dt.datetime.now(dt.UTC)
    for _ in range(5):
        try:
            secret = core.read_namespaced_secret(s.secret_name, s.secret_namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            secret = None
        secret_any: Any = secret
        old = _read(secret_any) if secret_any is not None else None
        new = _renewed(old, s.names(), now)
        if new is None:
            assert old is not None
            return old
        data: dict[str, bytes | str] = {
            "ca.crt": _b64(new.ca.cert),
            "ca.key": _b64(new.ca.key),
            "tls.crt": _b64(new.serving.cert),
            "tls.key": _b64(new.serving.key),
            "ca-bundle.crt": _b64(new.bundle),
        }
        meta = client.V1ObjectMeta(name=s.secret_name, namespace=s.secret_namespace)
        try:
            if secret is None:
                core.create_namespaced_secret(s.secret_namespace, client.V1Secret(metadata=meta, data=data))
            else:
                meta.resource_version = secret_any.metadata.resource_version
                core.replace_namespaced_secret(
                    s.secret_name, s.secret_namespace, client.V1Secret(metadata=meta, data=data)
                )
            log.info(
                "conversion webhook: certificate written to secret %s/%s", s.secret_namespace, s.secret_name
            )
            return new
        except ApiException as exc:
            if exc.status not in (409, 422):  # another replica wrote first: read what it wrote
                raise
    raise RuntimeError(f"secret {s.secret_namespace}/{s.secret_name}: could not settle its certificate")


REFUSAL_LOG_EVERY = 60.0  # seconds between log lines for the same refused conversion


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, bind: tuple[str, int], context: ssl.SSLContext, kinds: Mapping[tuple[str, str], Kind]
    ) -> None:
        super().__init__(bind, _Handler)
        self.context, self.kinds = context, kinds
        self.served: dict[tuple[str, str], list[str]] = {}  # each converted kind's served versions
        self._refusals: dict[str, float] = {}  # message -> when it was last logged
        self._refusals_lock = threading.Lock()

    def refused(self, message: str) -> None:
        """Log a refused conversion once a minute per message: clients and the operator's own
        watch retry the same failing object many times a second."""
        now = time.monotonic()
        with self._refusals_lock:
            if now - self._refusals.get(message, -REFUSAL_LOG_EVERY) < REFUSAL_LOG_EVERY:
                return
            if len(self._refusals) > 1000:
                self._refusals.clear()
            self._refusals[message] = now
        log.warning("conversion refused: %s", message)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """TLS on the connection's own thread: a slow handshake never holds the accept loop."""
        try:
            request = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("conversion webhook: TLS handshake with %s failed: %s", client_address, exc)
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("conversion webhook: connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections (and TLS sessions)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("conversion webhook: " + format, *args)

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        if path not in (PATH, CHECK_PATH):
            self._send(404, {"message": f"no such path {self.path}; conversions are POSTed to {PATH}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            self._send(400, {"message": "expected a ConversionReview or an AdmissionReview"})
            return
        started = time.perf_counter()
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError as exc:
            self._send(400, {"message": f"not JSON: {exc}"})
            return
        if path == CHECK_PATH:
            checked = admission(self.server.kinds, self.server.served, body)
            if not checked["response"]["allowed"]:
                UNREADABLE.labels(kind=str(((body.get("request") or {}).get("kind") or {}).get("kind"))).inc()
                self.server.refused(f"write refused: {checked['response']['status']['message']}")
            self._send(200, checked)
            return
        answer = review(self.server.kinds, body)
        response = answer["response"]
        ok = response["result"]["status"] == "Success"
        kinds = {str(o.get("kind")) for o in (body.get("request") or {}).get("objects") or []}
        for kind in kinds:
            CONVERSIONS.labels(kind=kind, result="Success" if ok else "Failure").inc()
        if not ok:
            self.server.refused(response["result"]["message"])
        CONVERSION_SECONDS.observe(time.perf_counter() - started)
        self._send(200, answer)

    def _send(self, code: int, doc: Mapping[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ConversionWebhook:
    """Serves conversions for ``kinds`` until stopped; keeps its certificate current."""

    def __init__(
        self,
        api: client.ApiClient,
        settings: WebhookSettings,
        kinds: Mapping[tuple[str, str], Kind],
        workdir: Path,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.apiext = client.ApiextensionsV1Api(api)
        self.settings, self.kinds, self.workdir = settings, kinds, workdir
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.current: Material | None = None
        self.crds: set[str] = set()  # the CRDs pointed at it (their caBundle follows a CA rotation)
        self._server: _Server | None = None
        self._read_at_start: dict[str, Any] = {}  # CRD -> its read by ``served_versions``, for ``inject``
        self._stop = threading.Event()

    def _load(self, m: Material) -> None:
        cert, key = self.workdir / "conversion.crt", self.workdir / "conversion.key"
        cert.write_bytes(m.serving.cert)
        key.touch(mode=0o600)
        key.write_bytes(m.serving.key)
        self.context.load_cert_chain(cert, key)  # new handshakes use it; open connections keep theirs
        self.current = m

    def start(self) -> None:
        self._load(material(self.core, self.settings))
        self._server = _Server(self.settings.bind, self.context, self.kinds)
        threading.Thread(target=self._server.serve_forever, name="conversion-webhook", daemon=True).start()
        threading.Thread(target=self._keep_current, name="conversion-certs", daemon=True).start()
        host, port = self.settings.bind
        names = ", ".join(sorted(f"{k.kind}.{k.group}" for k in self.kinds.values()))
        log.info("conversion webhook on https://%s:%d%s for %s", host or "0.0.0.0", port, PATH, names)

    def _keep_current(self) -> None:
        while not self._stop.wait(RELOAD_EVERY):
            try:
                m = material(self.core, self.settings)
                before = self.current
                if before is None or m.serving.cert != before.serving.cert:
                    self._load(m)
                    log.info("conversion webhook: serving a renewed certificate")
                if before is not None and m.bundle != before.bundle:
                    for crd in sorted(self.crds):
                        self.inject(crd)
            except Exception as exc:  # the certificate in use serves on; tried again later
                log.warning("conversion webhook: could not renew its certificate: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _read(self, crd: str) -> Any:
        """The CRD as it is now; the write check follows its served versions from every read (a
        version added while the operator runs is checked within ``CHECK_EVERY``)."""
        obj: Any = self.apiext.read_custom_resource_definition(crd)
        if self._server is not None:
            served = [v.name for v in obj.spec.versions if v.served]
            self._server.served[(obj.spec.group, obj.spec.names.kind)] = served
        return obj

    def served_versions(self, crd: str) -> tuple[list[str], str]:
        """The CRD's served versions and its conversion strategy (the CRD read is kept for
        ``inject`` right after: one read at start-up)."""
        obj = self._read_at_start[crd] = self._read(crd)
        versions = [v.name for v in obj.spec.versions if v.served]
        strategy = obj.spec.conversion.strategy if obj.spec.conversion else "None"
        return versions, str(strategy)

    def reachable(self, crd: str) -> str | None:
        """Read one object of the CRD in a version it does not store (the API server converts it
        through the webhook): None when that works (or nothing needs converting), else why not."""
        obj = self._read(crd)
        other = [v.name for v in obj.spec.versions if v.served and not v.storage]
        if not other:
            return None
        custom = client.CustomObjectsApi(self.apiext.api_client)
        try:
            custom.list_cluster_custom_object(obj.spec.group, other[0], obj.spec.names.plural, limit=1)
        except ApiException as exc:
            text = str(exc.body or exc.reason)
            if "conversion webhook" in text or "webhook" in text.lower():
                return text[:500]
            raise
        return None

    def watch_reachability(self) -> None:
        """The leader's loop: say (log and gauge) when the API server cannot reach the webhook —
        reads and writes of the kind that need a conversion then fail for every client."""
        said: dict[str, str | None] = {}
        while not self._stop.wait(CHECK_EVERY if said else 5.0):
            for crd in sorted(self.crds):
                try:
                    why = self.reachable(crd)
                except Exception as exc:  # the API server itself away: not the webhook's to say
                    log.debug("conversion webhook check of %s: %s", crd, exc)
                    continue
                REACHABLE.labels(crd=crd).set(0 if why else 1)
                if why and said.get(crd) != why:
                    log.warning("the API server cannot reach the conversion webhook for %s: %s", crd, why)
                elif not why and said.get(crd):
                    log.info("the API server reaches the conversion webhook for %s again", crd)
                said[crd] = why

    def inject(self, crd: str) -> None:
        """Point the CRD's conversion at this webhook, trusting its CA (a no-op when it does), and
        have the API server ask it whether a write of the kind could be read back in every served
        version (``check_writes``)."""
        assert self.current is not None
        self.check_writes(crd)
        patch = {
            "spec": {
                "conversion": {
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": ["v1"],
                        "clientConfig": self.settings.client_config(self.current.bundle),
                    },
                }
            }
        }
        self.apiext.patch_custom_resource_definition(crd, patch)
        if crd not in self.crds:
            log.info("conversion webhook: CRD %s converts through it", crd)
        self.crds.add(crd)

    def check_writes(self, crd: str) -> None:
        """The CRD's ValidatingWebhookConfiguration (created, or made current): creates and updates
        of the kind, in any version as written, are sent to ``CHECK_PATH``. Its failure policy is
        Ignore: with no replica serving, writes are not checked (those that need a conversion fail
        all the same), and deleting a resource or dropping its finalizer never waits for us."""
        assert self.current is not None and self._server is not None
        obj = self._read_at_start.pop(crd, None) or self._read(crd)
        group, plural, kind = obj.spec.group, obj.spec.names.plural, obj.spec.names.kind
        self._server.served[(group, kind)] = [v.name for v in obj.spec.versions if v.served]
        name = READABLE_WEBHOOK.format(crd=crd)
        body: dict[str, Any] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "helm-operator"}},
            "webhooks": [
                {
                    "name": f"readable.{crd}",
                    "clientConfig": {
                        k: v
                        for k, v in self.settings.client_config(self.current.bundle, CHECK_PATH).items()
                        if v is not None
                    },
                    "rules": [
                        {
                            "apiGroups": [group],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": [plural],
                            "scope": "*",
                        }
                    ],
                    "matchPolicy": "Exact",  # the object as written: its own version is readable
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 5,
                }
            ],
        }
        api = client.AdmissionregistrationV1Api(self.apiext.api_client)
        try:
            api.create_validating_webhook_configuration(cast(Any, body))  # a dict serialises as the model
            log.info("conversion webhook: writes of %s are checked to be readable in every version", crd)
        except ApiException as exc:
            if exc.status != 409:
                raise
            api.patch_validating_webhook_configuration(name, body)
