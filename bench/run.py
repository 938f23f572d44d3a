"""One benchmark run: the cluster, then for each N and repetition every contender in turn, each on
a fresh namespace that is deleted (and gone) before the next contender starts.

Results are written to the JSON file after every contender, so a run that fails still leaves what
it measured, together with the error.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import profile, scenarios, workload
from bench.cluster import BenchCluster
from bench.contenders import CONTENDERS, Contender, ContenderFailed, Ours, helm_version
from bench.measure import machine_facts
from bench.progress import Progress
from bench.scenarios import Settings, Target
from helm_operator.dev.tools import Toolchain


@dataclass(frozen=True)
class Plan:
    ns: list[int]
    repetitions: int
    contenders: list[str]
    settings: Settings
    kubeconfig: Path | None
    workdir: Path
    results_path: Path
    command: str
    mode: str
    profile: bool = False  # py-spy samples of our operator (timings then include its small cost)


def tool_versions(tools: Toolchain, cluster: BenchCluster) -> dict[str, str]:
    def first_line(*cmd: str) -> str:
        try:
            out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
        except OSError:
            return "unknown"
        return ((out.stdout or out.stderr).strip().splitlines() or ["unknown"])[0]

    return {
        "helm": helm_version(tools.helm),
        "Kubernetes (API server)": cluster.server_version(),
        "kubectl": kubectl_version(tools.kubectl),
        "etcd": first_line(str(tools.etcd), "--version"),
        "kwok": first_line(str(tools.kwok), "--version"),
        "go": first_line("go", "version"),
    }


def kubectl_version(kubectl: Path) -> str:
    out = subprocess.run([str(kubectl), "version", "--client", "-o", "json"], capture_output=True, text=True)
    try:
        return str(json.loads(out.stdout)["clientVersion"]["gitVersion"])
    except (ValueError, KeyError):
        return "unknown"


class Runner:
    def __init__(self, plan: Plan, progress: Progress) -> None:
        self.plan = plan
        self.progress = progress
        self.results: dict[str, Any] = {
            "schema": 1,
            "mode": plan.mode,
            "command": plan.command,
            "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "config": {
                "ns": plan.ns,
                "repetitions": plan.repetitions,
                "contenders": plan.contenders,
                **asdict(plan.settings),
            },
            "machine": machine_facts(),
            "versions": {},
            "commands": {},
            "notes": [],
            "runs": [],
        }
        self._t0 = time.monotonic()

    def save(self) -> None:
        self.results["wall_seconds"] = round(time.monotonic() - self._t0, 1)
        self.results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        self.plan.results_path.parent.mkdir(parents=True, exist_ok=True)
        self.plan.results_path.write_text(json.dumps(self.results, indent=1) + "\n")

    def run(self) -> dict[str, Any]:
        try:
            self._run()
        except BaseException as exc:
            self.results["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.save()
        return self.results

    def _run(self) -> None:
        plan, say = self.plan, self.progress.say
        tools = Toolchain.discover()
        tools.require("helm", "kubectl")
        with self.progress.step("control plane") as step:
            cluster = BenchCluster.open(plan.kubeconfig, tools, pods=max(plan.ns))
            step.done(f"{'attached to' if not cluster.owned else 'started'} {cluster.kubeconfig}")
        contenders: list[Contender] = []
        try:
            self.results["versions"] = tool_versions(tools, cluster)
            capacity = cluster.pod_capacity()
            if capacity < max(plan.ns):
                self.results["notes"].append(
                    f"The cluster's nodes hold {capacity} Pods, fewer than N={max(plan.ns)}: the rest stay "
                    "Pending (it does not change what Helm or the operators do, but adds scheduler work)."
                )
            if "sdk" in plan.contenders:
                self.results["notes"] += [
                    "The SDK deletes every Helm revision but the deployed one on each reconcile (its "
                    "`Sync`), so revisions are compared by the latest revision number, not by stored "
                    "Secrets.",
                    "The SDK runs with its defaults: a 1-minute reconcile period (each reconcile renders the "
                    "chart and runs an in-process dry-run upgrade) and watches of the objects it deployed.",
                ]
            if "helm-lean" in plan.contenders:
                self.results["notes"].append(
                    "helm-lean is plain helm with `--disable-openapi-validation`, the flag ours passes for "
                    "releases Helm 4 applies server-side (every object is then applied with strict "
                    "server-side field validation, which refuses what Helm's client-side OpenAPI check "
                    "would). Ours against it is the operator's own cost; against the floor, what a user "
                    "of plain helm with its defaults would see."
                )
            for key in plan.contenders:
                c = CONTENDERS[key](cluster, tools, plan.workdir, plan.settings.concurrency)
                if plan.profile and isinstance(c, Ours):
                    c.profiles = plan.workdir / "profiles"
                with self.progress.step(f"prepare {key}"):
                    c.prepare(say)
                contenders.append(c)
                self.results["versions"].update(c.versions())
                self.results["commands"][key] = c.command()
            if "helm" not in plan.contenders:
                with self.progress.step(f"background API requests, {plan.settings.idle_seconds:.0f}s"):
                    self.results["background"] = scenarios.background(cluster, plan.settings.idle_seconds)
            for n in plan.ns:
                names = workload.release_names(n)
                for rep in range(plan.repetitions):
                    order = contenders[rep % len(contenders) :] + contenders[: rep % len(contenders)]
                    for c in order:
                        self.results["runs"].append(self._one(cluster, c, names, rep))
                        self.save()
        finally:
            with self.progress.step("clean up"):
                for c in contenders:
                    c.dispose()
                cluster.close()
            if plan.profile:
                self.results["profile"] = profile.summarize(sorted((plan.workdir / "profiles").glob("*.txt")))

    @contextmanager
    def _namespace(self, cluster: BenchCluster, c: Contender, n: int, rep: int) -> Iterator[str]:
        ns = f"bench-{c.key}-{n}-r{rep}-{os.urandom(2).hex()}"
        cluster.create_namespace(ns)
        c.begin(ns, self.plan.workdir / ns)
        try:
            yield ns
        finally:
            try:
                c.end()
            finally:
                try:
                    with self.progress.step(f"{c.key} N={n}: delete namespace {ns}"):
                        cluster.delete_namespace(ns)
                except TimeoutError as exc:
                    # the run's measurements stand; the next contender gets its own namespace,
                    # and the report says which one was left behind and why
                    self.results.setdefault("left_behind", []).append(str(exc))

    def _one(self, cluster: BenchCluster, c: Contender, names: list[str], rep: int) -> dict[str, Any]:
        n, s, step = len(names), self.plan.settings, self.progress.step
        reps = self.plan.repetitions
        label = f"{c.key} N={n}" + (f" rep {rep + 1}/{reps}" if reps > 1 else "")
        record: dict[str, Any] = {"contender": c.key, "n": n, "rep": rep, "quiesced_s": {}}

        def quiet(scenario: str) -> str:
            """Wait for the contender to go quiet before a scenario; say so if it took a while."""
            waited = record["quiesced_s"][scenario] = scenarios.quiesce(t)
            return f" (after {waited:.0f}s waiting for quiet)" if waited >= 3 else ""

        with self._namespace(cluster, c, n, rep) as ns:
            record["namespace"] = ns
            t = Target(cluster, c, names, s)
            if c.operator:
                with step(f"{label}: start"):
                    c.start()
                    _wait(lambda: c.resumed([]) is not False, 60, f"{c.key} did not become ready")
            for key, wave_no in (("convergence", 1), ("update", 2)):
                with step(f"{label}: {key}") as st:
                    waited = quiet(key) if wave_no > 1 else ""
                    record[key] = r = scenarios.wave(t, wave_no)
                    calls = r["helm_subcommands"]
                    helm = ", helm: " + ", ".join(f"{k} {v}" for k, v in calls.items()) if calls else ""
                    st.done(f"{r['seconds']:.1f}s, CPU {r['cpu_s'] or 0:.1f}s{helm}{waited}")
            if rep > 0 or not (c.operator or c.key == "helm"):
                return record  # drift, idle and restart run once per N (repetition 1); the floor's
                # idle window is the background, once is enough
            if c.operator:
                with step(f"{label}: drift x{s.drift_changes}") as st:
                    waited = quiet("drift")
                    record["drift"] = d = scenarios.drift(t)
                    got = sorted(x["latency_s"] for x in d["changes"] if x["latency_s"] is not None)
                    med = f", median {got[len(got) // 2]:.2f}s" if got else ""
                    st.done(f"{len(got)}/{len(d['changes'])} corrected{med}{waited}")
            with step(f"{label}: idle {s.idle_seconds:.0f}s") as st:
                waited = quiet("idle")
                record["idle"] = i = scenarios.idle(t)
                cpu = "" if i["cpu_pct"] is None else f"CPU {i['cpu_pct']:.2f}% of a core, "
                st.done(f"{cpu}helm {'n/a' if i['helm_calls'] is None else i['helm_calls']}{waited}")
            record["footprint"] = scenarios.footprint(t, i["samples"])
            if c.operator:
                with step(f"{label}: restart") as st:
                    record["restart"] = r = scenarios.restart(t)
                    calls = "n/a" if r["helm_calls"] is None else r["helm_calls"]
                    st.done(f"resumed in {r['seconds']:.1f}s, helm {calls}")
        return record


def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise ContenderFailed(what)
        time.sleep(0.1)
