"""Helm post-renderer: check the tenant rules, then mark every object as owned by its resource.

Runs on every object Helm renders (hooks included: Helm 4 and Helm 3.21+ post-render hooks) before
Helm creates anything. An object outside what the Watch allows fails the render with a line per
object (``NamespaceViolation: …`` / ``ClusterScopedNotAllowed: …``), which the operator turns into
a ``Stalled`` condition. Otherwise it adds the owner label (what the dependent watches select on,
server-side; also on pod templates, so the Pods of a workload can be watched the same way) and,
where Kubernetes allows it, an ownerReference to the resource so garbage collection also works:
never on cluster-scoped kinds (their scope comes from API discovery, and from CRDs rendered
alongside), nor on objects annotated ``helm.sh/resource-policy: keep``. An instance serving a
static shard (``config.sharding``) also labels every object (never a pod template) with it.

Helm 3 runs a post-renderer executable found on ``PATH``; Helm 4 runs a ``postrender/v1`` plugin
found through ``HELM_PLUGINS``. ``install()`` lays out both under one name, so the same
``--post-renderer helm-operator-postrender`` flag works with either major version. The render
itself runs in the operator's process (:class:`Exchange`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import shlex
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

import yaml

from helm_operator.config.sharding import SHARD_LABEL
from helm_operator.core import manifest_yaml
from helm_operator.core.lease import Gate, LeaseLost, open_gate
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.core.tenancy import Scopes, TenantRules, namespaced, scopes_with_crds, violations
from helm_operator.release.record import HOOK_ANNOTATION, ObjectId, manifest_ids_of

log = logging.getLogger(__name__)

NAME = "helm-operator-postrender"
EXIT_VIOLATION = 3
_Loader = manifest_yaml.Loader  # libyaml when built with it, tags remembered: several x faster
_Dumper = manifest_yaml.Dumper

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


def _template_path(doc: Mapping[str, Any]) -> tuple[str, ...] | None:
    """Where the object keeps the template of its Pods, if they are labelled."""
    path = POD_TEMPLATES.get(str(doc.get("kind")))
    meta = doc.get("metadata") or {}
    if path is None or (doc["kind"] == "Job" and HOOK_ANNOTATION not in (meta.get("annotations") or {})):
        return None
    return path


def _owner_references(
    doc: Mapping[str, Any], owner_ref: Mapping[str, Any] | None, namespace: str | None, scopes: Scopes
) -> list[dict[str, Any]] | None:
    """The object's ownerReferences with the resource's, or None where it gets none: a kept or
    cluster-scoped object, or one in another namespace. The chart's own controller stays."""
    meta = doc.get("metadata") or {}
    keep = (meta.get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
    same_namespace = meta.get("namespace") in (None, namespace)
    if not owner_ref or keep or not same_namespace or not namespaced(doc, scopes):
        return None
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != owner_ref.get("uid")]
    ours = dict(owner_ref)
    if any(r.get("controller") for r in refs):  # one controller per object: the chart's stays
        ours.pop("controller", None)
    return [*refs, ours]


def _label_pod_template(doc: dict[str, Any], owner: str) -> None:
    path = _template_path(doc)
    if path is None:
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
    shard: str | None = None,
) -> list[dict[str, Any]]:
    """Add the owner label to every object (and pod template) and the ownerReference where it can
    resolve; and the shard's label to every object, though never to a pod template: a resource
    moved to another shard must not restart its workloads."""
    out = []
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc:
            continue
        meta = doc.setdefault("metadata", {}) or {}
        doc["metadata"] = meta
        labels = meta.get("labels") or {}
        labels[OWNER_LABEL] = owner
        if shard:
            labels[SHARD_LABEL] = shard
        meta["labels"] = labels
        _label_pod_template(doc, owner)
        refs = _owner_references(doc, owner_ref, namespace, scopes)
        if refs is not None:
            meta["ownerReferences"] = refs
        out.append(doc)
    return out


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # in the operator: an answer, not an exit
        raise _ArgumentError(f"{self.prog}: {message}")


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """Built once: parsing leaves it as it was, so renders in several threads share it."""
    parser = _Parser(prog=NAME)
    parser.add_argument("--owner", required=True, help="value of the owner label")
    parser.add_argument("--owner-ref", default="", help="ownerReference as JSON (omit for none)")
    parser.add_argument("--namespace", required=True, help="the release namespace")
    parser.add_argument("--scopes", default="", help="JSON file: {'<group>/<Kind>': namespaced}")
    parser.add_argument("--tenant", default="", help="tenant rules as JSON (omit: not enforced)")
    parser.add_argument("--shard", default="", help="the shard label's value (omit: none)")
    return parser


def render(argv: Sequence[str], manifest: bytes) -> tuple[int, bytes, str]:
    """One post-render of Helm's manifest stream: (exit code, changed stream, stderr text)."""
    code, out, err, _ = _render(argv, manifest)
    return code, out, err


def _render(argv: Sequence[str], manifest: bytes) -> tuple[int, bytes, str, tuple[ObjectId, ...]]:
    """``render``, and the objects the release's manifest will hold (none when refused)."""
    try:
        args = _parser().parse_args(list(argv))
    except _ArgumentError as exc:
        return 2, b"", f"{exc}\n", ()
    owner_ref = json.loads(args.owner_ref) if args.owner_ref else None
    rules = TenantRules(**json.loads(args.tenant)) if args.tenant else TenantRules(enforce=False)
    rules = TenantRules(rules.enforce, tuple(rules.allowed_namespaces), rules.allow_cluster_scoped)
    server: dict[str, bool] = json.loads(Path(args.scopes).read_text()) if args.scopes else {}
    try:
        nodes: list[tuple[yaml.MappingNode, dict[str, Any]]] | None = _documents(manifest)
    except _Unusual:
        nodes = None
    docs = [light for _, light in nodes] if nodes is not None else _objects(manifest)
    scopes = scopes_with_crds(server, docs)
    found = violations(docs, args.namespace, scopes, rules)
    if found:
        lines = [f"helm-operator: {v}" for v in found]
        return EXIT_VIOLATION, b"", "\n".join(lines) + "\n", ()
    shard = args.shard or None
    if nodes is not None:
        try:
            for node, light in nodes:
                _mark_node(node, light, args.owner, owner_ref, args.namespace, scopes, shard)
            out = yaml.serialize_all([n for n, _ in nodes], Dumper=_Dumper, allow_unicode=True)
            return 0, out.encode(), "", manifest_ids_of(docs)
        except _Unusual:
            docs = _objects(manifest)
    marked = mark(docs, args.owner, owner_ref, args.namespace, scopes, shard)
    out = yaml.dump_all(marked, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return 0, out.encode(), "", manifest_ids_of(marked)


# The same marks on the parsed YAML nodes, in C at both ends: libyaml composes Helm's stream into
# nodes and serialises them back, and Python touches only the few mappings the marks change and
# builds only the small parts the checks read (kind, metadata, a CRD's names). Constructing every
# value as a Python object and representing it again took half of each post-render. Whatever this
# path does not handle exactly as the object path would (a merge key, a duplicate key, a label map
# that is not a map) sends the whole stream through the object path instead.
_TAG = "tag:yaml.org,2002:"


class _Unusual(Exception):
    """The stream needs the object path."""


def _documents(manifest: bytes) -> list[tuple[yaml.MappingNode, dict[str, Any]]]:
    """Every object of the stream: its node, and what the checks read of it as plain values."""
    out = []
    for node in yaml.compose_all(manifest, Loader=_Loader):
        if not isinstance(node, yaml.MappingNode):
            continue
        fields = _fields(node)
        if "kind" not in fields:
            continue
        metadata = fields.get("metadata")
        if isinstance(metadata, yaml.MappingNode):
            _fields(metadata)  # its labels and references are changed in place
        light: dict[str, Any] = {
            k: _value(fields[k]) for k in ("apiVersion", "kind", "metadata") if k in fields
        }
        if light.get("kind") == "CustomResourceDefinition" and "spec" in fields:
            light["spec"] = _value(fields["spec"])
        out.append((node, light))
    return out


def _fields(node: yaml.MappingNode) -> dict[str, yaml.Node]:
    """A mapping's values by key; refused where the object path would read it otherwise."""
    found: dict[str, yaml.Node] = {}
    for key, value in node.value:
        if key.tag == _TAG + "merge" or not isinstance(key, yaml.ScalarNode) or key.value in found:
            raise _Unusual
        found[key.value] = value
    return found


def _value(node: yaml.Node) -> Any:
    return yaml.constructor.SafeConstructor().construct_document(node)


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "null"


def _node(value: Any) -> yaml.Node:
    """A node for a value the marks add (strings, booleans, maps and lists of them)."""
    if isinstance(value, bool):
        return yaml.ScalarNode(_TAG + "bool", "true" if value else "false")
    if isinstance(value, str):
        return yaml.ScalarNode(_TAG + "str", value)
    if isinstance(value, Mapping):
        return yaml.MappingNode(_TAG + "map", [(_node(str(k)), _node(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return yaml.SequenceNode(_TAG + "seq", [_node(v) for v in value])
    raise _Unusual


def _mapping(node: yaml.MappingNode, key: str) -> yaml.MappingNode | None:
    """The mapping under ``key``, or None where there is none (missing, or another value)."""
    for k, v in node.value:
        if k.value == key and isinstance(v, yaml.MappingNode):
            _fields(v)
            return v
    return None


def _ensure(node: yaml.MappingNode, key: str) -> yaml.MappingNode:
    """The mapping under ``key``, a new empty one in place of a missing or null value."""
    for i, (k, v) in enumerate(node.value):
        if k.value == key:
            if isinstance(v, yaml.MappingNode):
                _fields(v)
                return v
            if not _is_null(v):
                raise _Unusual
            new = yaml.MappingNode(_TAG + "map", [])
            node.value[i] = (k, new)
            return new
    new = yaml.MappingNode(_TAG + "map", [])
    node.value.append((_node(key), new))
    return new


def _put(node: yaml.MappingNode, key: str, value: Any) -> None:
    _put_node(node, key, _node(value))


def _put_node(node: yaml.MappingNode, key: str, value: yaml.Node) -> None:
    for i, (k, _) in enumerate(node.value):
        if k.value == key:
            node.value[i] = (k, value)
            return
    node.value.append((_node(key), value))


def _mark_node(
    node: yaml.MappingNode,
    light: dict[str, Any],
    owner: str,
    owner_ref: Mapping[str, Any] | None,
    namespace: str | None,
    scopes: Scopes,
    shard: str | None,
) -> None:
    """``mark`` of one object, on its node (``light``: its plain values, as the checks read them)."""
    meta_node = _ensure(node, "metadata")
    labels = _ensure(meta_node, "labels")
    _put(labels, OWNER_LABEL, owner)
    if shard:
        _put(labels, SHARD_LABEL, shard)
    path = _template_path(light)
    template: yaml.MappingNode | None = node if path is not None else None
    for part in path or ():
        template = _mapping(template, part) if template is not None else None
    if template is not None:  # a map of its own: the labels may be the selector's, by an alias
        template_meta = _ensure(template, "metadata")
        labels = yaml.MappingNode(_TAG + "map", list(_ensure(template_meta, "labels").value))
        _put(labels, OWNER_LABEL, owner)
        _put_node(template_meta, "labels", labels)
    refs = _owner_references(light, owner_ref, namespace, scopes)
    if refs is not None:
        _put(meta_node, "ownerReferences", refs)


def _objects(manifest: bytes) -> list[dict[str, Any]]:
    """The stream's objects as Python values (the object path)."""
    return [d for d in yaml.load_all(manifest, Loader=_Loader) if isinstance(d, dict) and "kind" in d]


def main(argv: list[str] | None = None) -> int:
    """The post-renderer as its own process (when no operator serves it, e.g. a stray helm call)."""
    stdin = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    code, out, err = render(sys.argv[1:] if argv is None else argv, stdin)
    sys.stderr.write(err)
    sys.stdout.write(out.decode())
    return code


class Exchange:
    """One post-render served inside the operator.

    Helm starts a post-renderer process per install or upgrade. A Python interpreter importing
    the YAML library costs more CPU than Helm's own work on a small chart, so the process Helm
    starts is a shell script (``sh`` and two ``cat``) that meets the operator in a folder of its
    own for this call: it writes Helm's stream into the FIFO ``in``, waits for the exit code on
    the FIFO ``code``, and prints ``out`` (or ``err``). The operator holds both FIFOs open from
    before helm starts until it ends, so neither side ever waits for the other to open, and an
    ended call (helm failed, timed out, or was stopped) leaves no process blocked on them.

    Helm applies nothing before its post-render answers, so the answer asks ``gate`` first (with
    leader election: does this replica still hold its lease?). A helm that was paused with the
    operator and resumes with it gets a refusal, not its objects, and fails before any write.
    """

    def __init__(self, root: Path, argv: Sequence[str], gate: Gate = open_gate) -> None:
        self.path = root / f"call-{uuid.uuid4().hex}"  # laid out only while the call is served
        self.argv = list(argv)
        self._gate = gate
        self.verdict = ""  # what a refused render said (Helm 4 drops a post-renderer's stderr)
        self.objects: tuple[ObjectId, ...] | None = None  # what the manifest holds, once rendered
        self._in = self._code = -1

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Exchange]:
        """Serve the call while helm runs (enter it with helm's slot, so queued calls hold no file
        descriptors); everything is closed and removed when it ends."""
        self.path.mkdir(parents=True, mode=0o700)
        try:
            os.mkfifo(self.path / "in", 0o600)
            os.mkfifo(self.path / "code", 0o600)
            # Read end without a writer yet: polls as not readable until the script opens it.
            self._in = os.open(self.path / "in", os.O_RDONLY | os.O_NONBLOCK)
            # Read-write: the script's read end opens at once, and what is written waits there.
            self._code = os.open(self.path / "code", os.O_RDWR)
        except OSError:
            self._close()
            raise
        task = asyncio.ensure_future(self._serve())
        try:
            yield self
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # the answer was never written: the script failed the render
                log.exception("post-render exchange %s failed", self.path.name)
            self._close()

    async def _serve(self) -> None:
        while True:  # once per helm call today; a helm that post-rendered twice is served twice
            stream = await self._receive()
            try:
                code, out, err, objects = await asyncio.to_thread(_render, self.argv, stream)
            except Exception as exc:  # a bug must fail the render with a reason, never hang helm
                code, out, err = 1, b"", f"helm-operator: post-renderer failed: {type(exc).__name__}: {exc}\n"
                objects = ()
            try:
                self._gate("the answer to a post-render")  # as late as can be: helm applies next
            except LeaseLost as exc:
                code, out, err, objects = 1, b"", f"helm-operator: {exc}\n", ()
            self.objects = objects if code == 0 else None
            (self.path / "out").write_bytes(out)
            (self.path / "err").write_text(err, errors="backslashreplace")
            self.verdict = self.verdict or (err if code else "")
            # A fresh read end, which polls as not readable until the next writer comes.
            os.close(self._in)
            self._in = -1
            self._in = os.open(self.path / "in", os.O_RDONLY | os.O_NONBLOCK)
            os.write(self._code, b"%d\n" % code)

    async def _receive(self) -> bytes:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        chunks: list[bytes] = []

        def readable() -> None:
            try:
                chunk = os.read(self._in, 1 << 20)
            except BlockingIOError:
                return
            except OSError as exc:
                loop.remove_reader(self._in)
                ended.set_exception(exc)
                return
            if chunk:
                chunks.append(chunk)
            else:  # the script closed its end: the whole stream is in
                loop.remove_reader(self._in)
                ended.set_result(None)

        loop.add_reader(self._in, readable)
        try:
            await ended
        finally:
            loop.remove_reader(self._in)
        return b"".join(chunks)

    def _close(self) -> None:
        for fd in (self._in, self._code):  # a script waiting for its code reads end-of-file
            if fd >= 0:
                os.close(fd)
        self._in = self._code = -1
        # A script that was still opening ``in`` is let through (its write then fails).
        with contextlib.suppress(OSError):
            os.close(os.open(self.path / "in", os.O_RDONLY | os.O_NONBLOCK))
        shutil.rmtree(self.path, ignore_errors=True)


# The process helm starts. Given no exchange folder (a helm call the operator does not serve),
# it runs the whole post-renderer in Python.
_SCRIPT = """#!/bin/sh
# helm-operator's post-renderer, written by the operator for its own helm processes.
case "$1" in --exchange=*) d="${{1#--exchange=}}"; shift ;; *) d= ;; esac
if [ -z "$d" ] || [ ! -p "$d/in" ]; then
    exec {python} -m helm_operator.adapters.postrender "$@"
fi
cat > "$d/in" || exit 1
if ! IFS= read -r code < "$d/code"; then
    echo "helm-operator: the operator's post-renderer gave no answer (is it shutting down?)" >&2
    exit 1
fi
if [ "$code" != 0 ]; then
    cat "$d/err" >&2
    exit "$code"
fi
exec cat "$d/out"
"""


def argv_for(
    owner: str,
    owner_ref: Mapping[str, Any] | None,
    namespace: str,
    scopes_file: Path | None,
    rules: TenantRules,
    shard: str | None = None,
) -> list[str]:
    """The post-renderer's own arguments for one release."""
    argv = [f"--owner={owner}", f"--namespace={namespace}"]
    if shard:
        argv.append(f"--shard={shard}")
    if owner_ref:
        argv.append("--owner-ref=" + json.dumps(dict(owner_ref), separators=(",", ":")))
    if scopes_file is not None:
        argv.append(f"--scopes={scopes_file}")
    if rules.enforce:
        argv.append("--tenant=" + json.dumps(asdict(rules), separators=(",", ":")))
    return argv


def flags_for(argv: Sequence[str], exchange: Exchange | None = None) -> list[str]:
    """Helm's ``--post-renderer*`` flags (Helm 3 and 4 alike); ``exchange``: served by the operator."""
    out = ["--post-renderer", NAME]
    for value in ([f"--exchange={exchange.path}"] if exchange else []) + list(argv):
        out += ["--post-renderer-args", value]
    return out


def install(base: Path, python: str = sys.executable) -> None:
    """Write the post-renderer executable (``base/bin``, for Helm 3) and the Helm 4 plugin
    (``base/plugins``); each call is then served through an :class:`Exchange`."""
    bindir, plugin = base / "bin", base / "plugins" / NAME
    bindir.mkdir(parents=True, exist_ok=True)
    plugin.mkdir(parents=True, exist_ok=True)
    script = _SCRIPT.format(python=shlex.quote(python))
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


if __name__ == "__main__":
    sys.exit(main())
