"""PostgreSQLCluster on the real node: real PostgreSQL processes, streaming replication, pg_dump
backups that restore with the same rows, retention that deletes files, the final backup on
deletion, and failover and switchover with data checked (no acknowledged write lost, never two
writable primaries)."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest

from helm_operator.dev import images
from helm_operator.dev.nodeconfig import LABEL, TAINT_KEY
from helm_operator.dev.realnode import RealNode

from .operator import OperatorProcess, Resources, eventually
from .test_day2 import PG, backups, day2, pg

ON_REAL_NODE: dict[str, Any] = {
    "nodeSelector": {LABEL: "true"},
    "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
}
PASSWORD = "pw-of-the-test"


def real_pg(name: str, **spec: Any) -> dict[str, Any]:
    """A PostgreSQLCluster of real PostgreSQL 15 instances (Debian's, imported) on the real node."""
    spec.setdefault("version", "15")
    return pg(
        name,
        imageRepository=images.POSTGRES.rsplit(":", 1)[0],
        imagePullPolicy="Never",
        auth={"password": PASSWORD},
        resources={"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}},
        postgresqlConf={"shared_buffers": "32MB", "wal_keep_size": "64MB"},
        **ON_REAL_NODE,
        **spec,
    )


def sql(res: Resources, pod: str, query: str, timeout: float = 60, check: bool = True) -> str:
    """One query in an instance, over its local socket, as the superuser; the unaligned result
    (``check=False``: "" while the instance does not answer, e.g. restarting)."""
    out = res.cluster.kubectl(
        "exec", "-n", res.ns, pod, "-c", "postgres", "--",
        "psql", "-h", "/var/run/postgresql", "-U", "postgres", "-d", "app", "-v", "ON_ERROR_STOP=1",
        "-tAc", query,
        timeout=timeout, check=check,
    )  # fmt: skip
    return out.stdout.strip() if out.returncode == 0 else ""


CHECKSUM = "SELECT count(*) || ' ' || md5(coalesce(string_agg(id || ':' || v, ',' ORDER BY id), '')) FROM t"


def run_pod(
    res: Resources, name: str, image: str, argv: list[str], volumes: dict[str, str], timeout: float = 120
) -> str:
    """A Pod on the real node that mounts claims (name -> mount path), runs argv, and returns its log."""
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": res.ns},
        "spec": {
            **ON_REAL_NODE,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": argv,
                    "volumeMounts": [
                        {"name": f"v{i}", "mountPath": p} for i, p in enumerate(volumes.values())
                    ],
                }
            ],
            "volumes": [
                {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(volumes)
            ],
        },
    }
    res.apply(doc)

    def done() -> str | None:
        got = res.get("pod", name) or {}
        return (
            got.get("status", {}).get("phase")
            if got.get("status", {}).get("phase") in ("Succeeded", "Failed")
            else None
        )

    phase = eventually(done, timeout=timeout, what=f"pod {name} to finish")
    log = res.cluster.kubectl("logs", "-n", res.ns, name).stdout
    assert phase == "Succeeded", f"{name}: {log}"
    res.cluster.kubectl("delete", "pod", "-n", res.ns, name, "--wait=false")
    return log


def files_on(res: Resources, claim: str, probe: str) -> dict[str, int]:
    """The files on a claim and their sizes, listed by a Pod on the real node."""
    out = run_pod(
        res,
        probe,
        images.DEBIAN,
        ["find", "/v", "-maxdepth", "1", "-type", "f", "-printf", "%f %s\\n"],
        {claim: "/v"},
    )
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if line.strip()}


def wait_replicating(res: Resources, primary: str, standbys: int) -> None:
    eventually(
        lambda: (
            sql(res, primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
            == str(standbys)
        ),
        timeout=120,
        what=f"{standbys} standbys streaming from {primary}",
    )


@pytest.mark.timeout(1500)
def test_backups_restore_with_the_same_rows_retention_deletes_files_and_the_final_backup_holds_the_last_rows(
    real_node: RealNode, operator: OperatorProcess, res: Resources
) -> None:
    name = "bk"
    res.apply(real_pg(name, replicas=3, backup={"schedule": "* * * * *", "maxBackups": 2}))
    res.wait_condition(PG, name, "Ready", timeout=300)
    eventually(lambda: day2(res, name).get("currentPrimary") == f"{name}-0", timeout=60, what="bk-0 primary")
    wait_replicating(res, f"{name}-0", 2)

    sql(res, f"{name}-0", "CREATE TABLE t (id int PRIMARY KEY, v text); "
        "INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 20000) g")  # fmt: skip
    written = sql(res, f"{name}-0", CHECKSUM)
    assert written.startswith("20000 ")
    # The standbys replay it (streaming replication of real WAL).
    eventually(
        lambda: sql(res, f"{name}-2", CHECKSUM, check=False) == written, timeout=60, what="bk-2 caught up"
    )
    after_write = time.time()

    # The scheduled backup runs on time (every minute) and is a valid, complete dump.
    def first_after_write() -> dict[str, Any] | None:
        for b in day2(res, name).get("backups", []):
            started = b.get("startTime") or ""
            if b.get("phase") == "Succeeded" and started and _epoch(started) >= after_write - 1:
                return dict(b)
        return None

    backup = eventually(first_after_write, timeout=150, what="a scheduled backup after the write")
    claim = f"{name}-backups"
    files = files_on(res, claim, "ls-1")
    assert f"{backup['name']}.sql.gz" in files and files[f"{backup['name']}.sql.gz"] > 100_000, files
    check = run_pod(
        res, "gz-check", images.POSTGRES,
        ["bash", "-ec", 'gunzip -t "/b/$0" && gunzip -c "/b/$0" | grep -c "^COPY public.t "',
         f"{backup['name']}.sql.gz"],
        {claim: "/b"},
    )  # fmt: skip
    assert check.strip() == "1", check

    # A new cluster restored from that backup has exactly those rows.
    res.apply(real_pg("rs", restore={"fromBackup": backup["name"]}))
    res.wait_condition(PG, "rs", "Ready", timeout=300)
    assert sql(res, "rs-0", CHECKSUM) == written

    # Count retention (2) prunes the records and deletes the files of the pruned backups.
    eventually(lambda: len(backups(res, name)) >= 2 and backup["name"] not in backups(res, name), timeout=200,
               what="the first backup pruned by count")  # fmt: skip
    kept = set(backups(res, name))

    def files_match() -> bool:
        on_volume = {f.removesuffix(".sql.gz") for f in files_on(res, claim, f"ls-{int(time.time())}")}
        return backup["name"] not in on_volume and kept <= on_volume

    eventually(files_match, timeout=90, interval=5, what="the pruned backup's file deleted")

    # The final backup taken on deletion holds the last rows written before it.
    sql(res, f"{name}-0", "INSERT INTO t SELECT g, 'last' FROM generate_series(20001, 20100) g")
    last = sql(res, f"{name}-0", CHECKSUM)
    uid = res.get(PG, name)["metadata"]["uid"]  # type: ignore[index]
    res.delete(PG, name)
    final = [f for f in files_on(res, claim, "ls-final") if f.startswith(f"{name}-final")]
    assert len(final) == 1, final
    res.apply(real_pg("fin", restore={"fromBackup": f"pvc://{claim}/{final[0]}"}))
    res.wait_condition(PG, "fin", "Ready", timeout=300)
    assert sql(res, "fin-0", CHECKSUM) == last and last.startswith("20100 ")
    assert uid[:8] in final[0]


def _epoch(text: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# A client of the cluster: one INSERT through the client Service every 0.1 s, each on a new
# connection; prints "<epoch> ok <id>" for an acknowledged write, "<epoch> fail" otherwise.
# A new connection per write every 0.1 s, through the Service: ``WRITER`` one loop (the e2e tests,
# which share the machine with other suites), ``FAST_WRITER`` two side by side (the benchmark, alone
# on the machine: about 10 writes a second; one loop writes fewer than 5 when a connection takes
# ~0.1 s).
_WRITE = r"""
( while true; do
    if id=$(psql "host=$SERVICE user=postgres dbname=app connect_timeout=1" -tAqc \
            "INSERT INTO w (at) VALUES (now()) RETURNING id" 2>/dev/null); then
      echo "$(date +%s.%N) ok $id"
    else
      echo "$(date +%s.%N) fail"
    fi
    sleep 0.1
  done ) &
"""
WRITER = _WRITE + "wait\n"
FAST_WRITER = _WRITE + _WRITE + "wait\n"

# Every instance asked directly, ten times a second, on one session each (psql's \watch: a new
# psql per look managed fewer than 2 a second on a busy machine): "<epoch> <ordinal> <t|f|down>"
# (t: in recovery, a standby; f: writable, a primary; the time is the server's clock, the same
# machine's). A session that ends (its instance restarting) logs "down" and connects again.
OBSERVER = r"""
for i in 0 1 2; do
  ( while true; do
      printf '%s\n' "SELECT extract(epoch FROM clock_timestamp()) || ' $i ' || \
                       CASE WHEN pg_is_in_recovery() THEN 't' ELSE 'f' END" '\watch 0.1' |
        psql "host=$NAME-$i.$HEADLESS user=postgres dbname=postgres connect_timeout=1" -tAq 2>/dev/null
      echo "${EPOCHREALTIME} $i down"
      sleep 0.2
    done ) &
done
wait
"""


def _client_pod(res: Resources, name: str, script: str, env: dict[str, str]) -> None:
    res.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": res.ns},
            "spec": {
                **ON_REAL_NODE,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": images.POSTGRES,
                        "imagePullPolicy": "Never",
                        "command": ["bash", "-c", script],
                        "env": [{"name": k, "value": v} for k, v in {**env, "PGPASSWORD": PASSWORD}.items()],
                    }
                ],
            },
        }
    )
    res.cluster.kubectl(
        "wait", "-n", res.ns, f"pod/{name}", "--for=condition=Ready", "--timeout=60s", timeout=70
    )


def _explain(res: Resources, name: str) -> None:
    """What the cluster looked like when a step did not happen: Events, Pods, instance logs."""
    print("--- events:")
    for e in res.events(name):
        print(f"  {e.get('lastTimestamp') or e.get('eventTime')} {e['reason']}: {e['message']}")
    print(res.cluster.kubectl("get", "pods", "-n", res.ns, "-o", "wide", "--show-labels").stdout)
    print(json.dumps(day2(res, name), indent=1))
    for i in range(3):
        print(f"--- {name}-{i}:")
        print(res.cluster.kubectl("logs", "-n", res.ns, f"{name}-{i}", "--tail=25", check=False).stdout)


def _log(res: Resources, pod: str) -> list[list[str]]:
    """The Pod's lines, split, in time order (its loops write side by side)."""
    lines = [
        line.split() for line in res.cluster.kubectl("logs", "-n", res.ns, pod).stdout.splitlines() if line
    ]
    return sorted((w for w in lines if len(w) >= 2), key=lambda w: float(w[0]))


def two_writable(samples: list[list[str]], window: float = 0.3) -> list[tuple[float, list[str]]]:
    """Moments when two instances both answered as writable primaries within ``window`` seconds."""
    last: dict[str, tuple[float, str]] = {}
    found = []
    for at, who, state in sorted(((float(t), i, s) for t, i, s in samples), key=lambda x: x[0]):
        last[who] = (at, state)
        writable = [i for i, (t, s) in last.items() if s == "f" and at - t <= window]
        if len(writable) > 1:
            found.append((at, writable))
    return found


def unavailable(writes: list[list[str]], since: float) -> tuple[float, float, float]:
    """The write-unavailability window after ``since``: last acknowledged write before the
    first failure, first acknowledged write after it, and the gap between them. A write that
    hangs rather than fails leaves no failure: then the longest pause between acknowledged writes
    is the window."""
    after = [(float(w[0]), w[1]) for w in writes if float(w[0]) >= since]
    first_fail = next((t for t, r in after if r == "fail"), None)
    if first_fail is None:
        oks = sorted(float(w[0]) for w in writes if w[1] == "ok")
        pairs = [(a, b) for a, b in itertools.pairwise(oks) if b >= since]
        last_ok, back = max(pairs, key=lambda p: p[1] - p[0]) if pairs else (since, since)
        return last_ok, back, back - last_ok
    last_ok = max(float(w[0]) for w in writes if w[1] == "ok" and float(w[0]) < first_fail)
    back = next(t for t, r in after if r == "ok" and t > first_fail)
    return last_ok, back, back - last_ok


def written_again(writes: list[list[str]], since: float, promoted: float) -> bool:
    """A write acknowledged after the new primary was seen and after the last failed write since
    ``since`` (the window is over: a write can fail a little after the promotion, while the
    Service's endpoints follow the label)."""
    failed = [float(w[0]) for w in writes if w[1] == "fail" and float(w[0]) >= since]
    after = max([promoted, *failed])
    return any(w[1] == "ok" and float(w[0]) > after for w in writes)


@pytest.mark.timeout(1500)
def test_failover_and_switchover_with_data_never_two_writable_primaries(
    real_node: RealNode, operator: OperatorProcess, res: Resources
) -> None:
    name = "ha"
    res.apply(real_pg(name, replicas=3, failoverDelay="5s"))
    res.wait_condition(PG, name, "Ready", timeout=300)
    eventually(lambda: day2(res, name).get("currentPrimary") == "ha-0", timeout=60, what="ha-0 primary")
    wait_replicating(res, "ha-0", 2)
    sql(res, "ha-0", "CREATE TABLE w (id bigserial PRIMARY KEY, at timestamptz NOT NULL)")
    headless = f"{name}-headless.{res.ns}.svc.cluster.local"
    _client_pod(res, "observer", OBSERVER, {"NAME": name, "HEADLESS": headless})
    _client_pod(res, "writer", WRITER, {"SERVICE": f"{name}.{res.ns}.svc.cluster.local"})
    eventually(lambda: sum(1 for w in _log(res, "writer") if w[1] == "ok") >= 20, timeout=60, what="writes")

    def primary_after(old: str, started: float, how: str) -> str:
        """The instance promoted in place of ``old`` (the Ready standby with the lowest ordinal)."""
        try:
            new = eventually(lambda: (day2(res, name).get("currentPrimary") or old) != old and
                             day2(res, name)["currentPrimary"], timeout=120, interval=0.5,
                             what=f"a new primary after {how}")  # fmt: skip
        except AssertionError:
            _explain(res, name)
            raise
        seen = time.time()
        eventually(lambda: written_again(_log(res, "writer"), started, seen),
                   timeout=120, what=f"writes through the Service after {how}")  # fmt: skip
        last_ok, back, gap = unavailable(_log(res, "writer"), started)
        when = f"last ok {last_ok - started:+.2f}s, back {back - started:+.2f}s"
        print(f"{how}: {new} promoted, writes unavailable {gap:.2f}s ({when})")
        return str(new)

    def rejoins(old: str, primary: str) -> None:
        """The old primary comes back as a standby that replicates from the new one."""
        eventually(lambda: sql(res, old, "SELECT pg_is_in_recovery()", check=False) == "t",
                   timeout=180, what=f"{old} a standby")  # fmt: skip
        wait_replicating(res, primary, 2)

    # 1. PostgreSQL stops in the primary's container (and again as it restarts, for longer than
    #    failoverDelay): a standby is promoted after failoverDelay.
    t1 = time.time()
    for _ in range(3):
        res.cluster.kubectl("exec", "-n", res.ns, "ha-0", "-c", "postgres", "--", "bash", "-c",
                            'gosu postgres pg_ctl stop -D "$PGDATA" -m immediate', check=False)  # fmt: skip
        time.sleep(2)
    first = primary_after("ha-0", t1, "postgres stopped in the primary")
    failover = [e for e in res.events(name) if e["reason"] == "Failover"]
    assert (
        failover
        and f"promoted {first}" in failover[-1]["message"]
        and "failoverDelay 5s" in failover[-1]["message"]
    )
    rejoins("ha-0", first)

    # 2. The primary's Pod is deleted.
    t2 = time.time()
    res.cluster.kubectl("delete", "pod", "-n", res.ns, first, "--wait=false")
    second = primary_after(first, t2, "the primary's Pod deleted")
    rejoins(first, second)

    # 3. A switchover on request (to a Ready standby) loses no acknowledged write.
    target = next(p for p in ("ha-0", "ha-1", "ha-2") if p != second)
    res.cluster.kubectl(
        "wait", "-n", res.ns, f"pod/{target}", "--for=condition=Ready", "--timeout=120s", timeout=130
    )
    t3 = time.time()
    res.cluster.kubectl("annotate", PG, name, "-n", res.ns, f"helm-operator.io/action=switchover={target}")
    assert primary_after(second, t3, "switchover") == target
    rejoins(second, target)
    time.sleep(2)

    writes = _log(res, "writer")
    acknowledged = {int(w[2]) for w in writes if w[1] == "ok"}
    stored = {int(i) for i in sql(res, target, "SELECT id FROM w").split()}
    assert acknowledged <= stored, f"acknowledged writes lost: {sorted(acknowledged - stored)[:20]}"
    samples = _log(res, "observer")
    per_instance = {i: sorted(float(s[0]) for s in samples if s[1] == i) for i in "012"}
    span = max(v[-1] for v in per_instance.values()) - min(v[0] for v in per_instance.values())
    rates = {i: len(v) / span for i, v in per_instance.items()}
    print(f"observer: {len(samples)} samples over {span:.0f}s, per instance {rates}")
    # Several looks a second at every instance (about 10; fewer while one restarts): dense enough
    # that two writable primaries at once would be seen.
    assert all(r >= 5 for r in rates.values()), rates
    assert two_writable(samples) == [], "two writable primaries seen"


def exact_version() -> str:
    """The exact PostgreSQL version the image is also tagged with ("15.14"): the same binary as
    "15", so a change from one to the other restarts every instance on the same PostgreSQL."""
    path = images.archives([images.POSTGRES])[images.POSTGRES]
    also = [n for n in images.names(path) if n != images.POSTGRES]
    assert len(also) == 1, also
    return also[0].rpartition(":")[2]


def images_of(res: Resources, name: str) -> dict[str, str]:
    selector = f"app.kubernetes.io/component=database,app.kubernetes.io/instance={name}"
    pods = json.loads(res.cluster.kubectl("get", "pods", "-n", res.ns, "-l", selector, "-o", "json").stdout)
    return {p["metadata"]["name"]: p["spec"]["containers"][0]["image"] for p in pods["items"]}


@pytest.mark.timeout(1500)
def test_a_version_change_restarts_the_standbys_first_and_moves_the_primary_last_by_a_switchover(
    real_node: RealNode, operator: OperatorProcess, res: Resources
) -> None:
    """15 -> 15.x (the same image under its exact version's tag: Debian ships one PostgreSQL 15):
    the standbys restart first, each streaming again before the next; the primary hands over to a
    restarted standby (a switchover) and restarts last; a writer through the Service loses no
    acknowledged write, never two writable primaries; a major version change is refused."""
    name = "vc"
    exact = exact_version()
    res.apply(real_pg(name, replicas=3, failoverDelay="5s"))
    res.wait_condition(PG, name, "Ready", timeout=300)
    eventually(lambda: day2(res, name).get("currentPrimary") == f"{name}-0", timeout=60, what="vc-0 primary")
    wait_replicating(res, f"{name}-0", 2)
    sql(res, f"{name}-0", "CREATE TABLE w (id bigserial PRIMARY KEY, at timestamptz NOT NULL)")
    headless = f"{name}-headless.{res.ns}.svc.cluster.local"
    _client_pod(res, "observer", OBSERVER, {"NAME": name, "HEADLESS": headless})
    _client_pod(res, "writer", WRITER, {"SERVICE": f"{name}.{res.ns}.svc.cluster.local"})
    eventually(lambda: sum(1 for w in _log(res, "writer") if w[1] == "ok") >= 20, timeout=60, what="writes")
    before = images_of(res, name)
    assert set(before.values()) == {images.POSTGRES}, before

    started = time.time()
    res.apply(real_pg(name, replicas=3, failoverDelay="5s", version=exact))
    new_image = f"{images.POSTGRES.rpartition(':')[0]}:{exact}"

    def rolled() -> dict[str, Any] | None:
        roll = day2(res, name).get("roll") or {}
        done = roll.get("remaining") == [] and roll.get("member") is None and roll.get("rolled")
        return roll if done and set(images_of(res, name).values()) == {new_image} else None

    try:
        roll = eventually(rolled, timeout=900, interval=2, what=f"every instance on {new_image}")
    except AssertionError:
        _explain(res, name)
        raise
    took = time.time() - started
    res.wait_condition(PG, name, "Ready", timeout=120)
    assert roll["rolled"] == [f"{name}-2", f"{name}-1", f"{name}-0"], roll  # the primary last
    primary = day2(res, name)["currentPrimary"]
    assert primary in (f"{name}-1", f"{name}-2"), primary
    switched = [e["message"] for e in res.events(name) if e["reason"] == "Switchover"]
    assert switched == [f"primary was {name}-0, is now {primary}"], switched
    assert not [e for e in res.events(name) if e["reason"] == "Failover"]
    eventually(lambda: sql(res, f"{name}-0", "SELECT pg_is_in_recovery()", check=False) == "t",
               timeout=180, what=f"{name}-0 a standby")  # fmt: skip
    wait_replicating(res, primary, 2)
    time.sleep(2)

    writes = _log(res, "writer")
    acknowledged = {int(w[2]) for w in writes if w[1] == "ok"}
    stored = {int(i) for i in sql(res, primary, "SELECT id FROM w").split()}
    assert acknowledged <= stored, f"acknowledged writes lost: {sorted(acknowledged - stored)[:20]}"
    during = [w for w in writes if float(w[0]) >= started]
    rate = len(during) / (float(during[-1][0]) - started)
    last_ok, back, gap = unavailable(writes, started)
    failed = sum(1 for w in during if w[1] == "fail")
    print(
        f"version change 15 -> {exact}: {took:.0f}s; {len(during)} writes ({rate:.1f}/s), {failed} failed, "
        f"unavailable {gap:.2f}s (last ok {last_ok - started:+.1f}s, back {back - started:+.1f}s)"
    )
    # The rate is the benchmark's to show (bench.day2_real --parts pg-version: 9-10 writes/s, alone
    # on the machine); here, beside the other suites, the writer must only have written throughout.
    assert rate >= 1, f"the writer wrote {rate:.1f}/s"
    assert two_writable(_log(res, "observer")) == [], "two writable primaries seen"

    # A major version: refused before anything restarts, the reason on the resource.
    res.apply(real_pg(name, replicas=3, failoverDelay="5s", version="16"))
    c = res.wait_condition(PG, name, "Stalled", timeout=180)
    assert c["reason"] == "InvalidSpec" and f"{exact} to 16 changes the major version" in c["message"], c
    assert set(images_of(res, name).values()) == {new_image}
