"""Helm post-renderer: check the tenant rules, then mark every object as owned by its resource.

Runs on every object Helm renders (hooks included: Helm 4 and Helm 3.21+ post-render hooks) before
Helm creates anything. An object outside what the Watch allows fails the render with a line per
object (``NamespaceViolation: …`` / ``ClusterScopedNotAllowed: …``), which the operator turns into
a ``Stalled`` condition. Otherwise it adds the owner label (what the dependent watches select on,
server-side; also on pod templates, so the Pods of a workload can be watched the same way) and,
where Kubernetes allows it, an ownerReference to the resource so garbage collection also works:
never on cluster-scoped kinds (their scope comes from API discovery, and from CRDs rendered
alongside), nor on objects annotated ``helm.sh/resource-policy: keep``.

Helm 3 runs a post-renderer executable found on ``PATH``; Helm 4 runs a ``postrender/v1`` plugin
found through ``HELM_PLUGINS``. ``install()`` lays out both under one name, so the same
``--post-renderer helm-operator-postrender`` flag works with either major version.
"""

from __future__ import annotations

import argparse
import json
import socketserver
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

import yaml

from helm_operator.core.naming import OWNER_LABEL
from helm_operator.core.tenancy import Scopes, TenantRules, namespaced, scopes_with_crds, violations

NAME = "helm-operator-postrender"
EXIT_VIOLATION = 3
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: several x faster
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

# Where a kind keeps the template of the Pods it creates. A plain Job is left out: its template is
# immutable, so labelling the template of a Job an earlier release created would fail the upgrade
# (a Helm hook Job is created anew each time, and is labelled).
POD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "Job": ("spec", "template"),
}


def _label_pod_template(doc: dict[str, Any], owner: str) -> None:
    path = POD_TEMPLATES.get(str(doc.get("kind")))
    meta = doc.get("metadata") or {}
    if path is None or (doc["kind"] == "Job" and "helm.sh/hook" not in (meta.get("annotations") or {})):
        return
    node: Any = doc
    for part in path:
        if not isinstance(node, dict) or not isinstance(node.get(part), dict):
            return
        node = node[part]
    template_meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
    template_meta["labels"] = {**(template_meta.get("labels") or {}), OWNER_LABEL: owner}
    node["metadata"] = template_meta


def mark(
    docs: Iterable[Any],
    owner: str,
    owner_ref: Mapping[str, Any] | None,
    namespace: str | None,
    scopes: Scopes,
) -> list[dict[str, Any]]:
    """Add the owner label to every object (and pod template) and the ownerReference where it can
    resolve."""
    out = []
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc:
            continue
        meta = doc.setdefault("metadata", {}) or {}
        doc["metadata"] = meta
        labels = meta.get("labels") or {}
        labels[OWNER_LABEL] = owner
        meta["labels"] = labels
        _label_pod_template(doc, owner)
        keep = (meta.get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
        same_namespace = meta.get("namespace") in (None, namespace)
        if owner_ref and not keep and same_namespace and namespaced(doc, scopes):
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != owner_ref.get("uid")]
            meta["ownerReferences"] = [*refs, dict(owner_ref)]
        out.append(doc)
    return out


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # in the server: an answer, not an exit
        raise _ArgumentError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=NAME)
    parser.add_argument("--owner", required=True, help="value of the owner label")
    parser.add_argument("--owner-ref", default="", help="ownerReference as JSON (omit for none)")
    parser.add_argument("--namespace", required=True, help="the release namespace")
    parser.add_argument("--scopes", default="", help="JSON file: {'<group>/<Kind>': namespaced}")
    parser.add_argument("--tenant", default="", help="tenant rules as JSON (omit: not enforced)")
    parser.add_argument("--verdict", default="", help="file to write violations to (Helm 4 drops stderr)")
    return parser


def render(argv: Sequence[str], manifest: bytes) -> tuple[int, bytes, str]:
    """One post-render of Helm's manifest stream: (exit code, changed stream, stderr text)."""
    try:
        args = _parser().parse_args(list(argv))
    except _ArgumentError as exc:
        return 2, b"", f"{exc}\n"
    owner_ref = json.loads(args.owner_ref) if args.owner_ref else None
    rules = TenantRules(**json.loads(args.tenant)) if args.tenant else TenantRules(enforce=False)
    rules = TenantRules(rules.enforce, tuple(rules.allowed_namespaces), rules.allow_cluster_scoped)
    docs = [d for d in yaml.load_all(manifest, Loader=_Loader) if isinstance(d, dict) and "kind" in d]
    server: dict[str, bool] = json.loads(Path(args.scopes).read_text()) if args.scopes else {}
    scopes = scopes_with_crds(server, docs)
    found = violations(docs, args.namespace, scopes, rules)
    if found:
        lines = [f"helm-operator: {v}" for v in found]
        if args.verdict:
            Path(args.verdict).write_text("\n".join(lines) + "\n")
        return EXIT_VIOLATION, b"", "\n".join(lines) + "\n"
    marked = mark(docs, args.owner, owner_ref, args.namespace, scopes)
    out = yaml.dump_all(marked, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return 0, out.encode(), ""


def main(argv: list[str] | None = None) -> int:
    """The post-renderer as its own process (when no operator serves it, e.g. a stray helm call)."""
    stdin = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    code, out, err = render(sys.argv[1:] if argv is None else argv, stdin)
    sys.stderr.write(err)
    sys.stdout.write(out.decode())
    return code


class _Handler(socketserver.StreamRequestHandler):
    """One request of the client: ``<size>\\n`` and the NUL-separated arguments, then the stream
    until the client shuts its side down. The answer: ``<exit code> <stderr size>\\n``, stderr,
    then the changed stream."""

    def handle(self) -> None:
        try:
            size = int(self.rfile.readline())
            argv = (
                [a.decode("utf-8", "surrogateescape") for a in self.rfile.read(size).split(b"\0")]
                if size
                else []
            )
            code, out, err = render(argv, self.rfile.read())
        except Exception as exc:  # a bug must fail the render with a reason, never hang helm
            code, out, err = 1, b"", f"helm-operator: post-renderer failed: {type(exc).__name__}: {exc}\n"
        stderr = err.encode("utf-8", "backslashreplace")
        self.wfile.write(b"%d %d\n" % (code, len(stderr)) + stderr + out)


class Server:
    """Post-renders inside the operator process.

    Helm runs a post-renderer process per install or upgrade. Starting a Python interpreter that
    imports the YAML library and this package costs more CPU than Helm's own work on a small chart,
    so the process Helm starts is a small stdlib-only client (``python -SI``, no site-packages)
    that hands the stream to this server over a Unix socket in the operator's private work folder
    and relays the answer. Without the server (no operator running) the client runs the full
    post-renderer itself.
    """

    def __init__(self, socket_path: Path) -> None:
        socket_path.unlink(missing_ok=True)
        self.path = socket_path
        self._server = socketserver.ThreadingUnixStreamServer(str(socket_path), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="postrender", daemon=True)

    def start(self) -> Server:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)


# Only built-in modules: importing json and socket took more CPU than the interpreter's start.
_CLIENT = """# helm-operator's post-renderer client, written by the operator for its own helm processes.
import _socket, os, sys
argv = sys.argv[1:]
s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
try:
    s.connect({socket!r})
except OSError:
    os.execv({python!r}, [{python!r}, "-m", "helm_operator.adapters.postrender", *argv])
args = b"\\0".join(os.fsencode(a) for a in argv)
s.sendall(b"%d\\n" % len(args) + args + sys.stdin.buffer.read())
s.shutdown(_socket.SHUT_WR)
chunks = []
while chunk := s.recv(1 << 16):
    chunks.append(chunk)
head, _, rest = b"".join(chunks).partition(b"\\n")
try:
    code, size = (int(x) for x in head.split())
except ValueError:
    sys.exit("helm-operator: the operator's post-renderer gave no answer (is it shutting down?)")
sys.stderr.buffer.write(rest[:size])
sys.stdout.buffer.write(rest[size:])
sys.exit(code)
"""


def args_for(
    owner: str,
    owner_ref: Mapping[str, Any] | None,
    namespace: str,
    scopes_file: Path | None,
    rules: TenantRules,
    verdict: Path | None = None,
) -> list[str]:
    """The ``--post-renderer*`` flags for one release (Helm 3 and 4 alike)."""
    out = ["--post-renderer", NAME]
    values = [f"--owner={owner}", f"--namespace={namespace}"]
    if verdict is not None:
        values.append(f"--verdict={verdict}")
    if owner_ref:
        values.append("--owner-ref=" + json.dumps(dict(owner_ref), separators=(",", ":")))
    if scopes_file is not None:
        values.append(f"--scopes={scopes_file}")
    if rules.enforce:
        values.append("--tenant=" + json.dumps(asdict(rules), separators=(",", ":")))
    for v in values:
        out += ["--post-renderer-args", v]
    return out


def install(base: Path, python: str = sys.executable) -> Path:
    """Write the client executable (``base/bin``, for Helm 3) and the Helm 4 plugin
    (``base/plugins``); returns the socket path the client connects to (see ``Server``)."""
    bindir, plugin = base / "bin", base / "plugins" / NAME
    bindir.mkdir(parents=True, exist_ok=True)
    plugin.mkdir(parents=True, exist_ok=True)
    sock, client = base / "postrender.sock", base / "postrender-client.py"
    client.write_text(_CLIENT.format(python=python, socket=str(sock)))
    # Through sh rather than a shebang: an interpreter path may hold spaces or exceed its limit.
    script = f'#!/bin/sh\nexec "{python}" -SI "{client}" "$@"\n'
    for exe in (bindir / NAME, plugin / NAME):
        exe.write_text(script)
        exe.chmod(0o755)
    (plugin / "plugin.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "type": "postrenderer/v1",
                "name": NAME,
                "version": "0.1.0",
                "runtime": "subprocess",
                "runtimeConfig": {"platformCommand": [{"command": "${HELM_PLUGIN_DIR}/" + NAME}]},
            },
            sort_keys=False,
        )
    )
    return sock


if __name__ == "__main__":
    sys.exit(main())
