"""The Kubernetes base (deploy/k8s, kustomize): every resource it lists is there and parses;
every Deployment and StatefulSet has liveness and readiness probes on a port its container
names, resources, and a PodDisruptionBudget; a worker's termination grace outlasts its
--grace-ms and its lease; and every rsjobs command line in it is one the CLI accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rsjobs.cli import build_parser
from tests.support.processes import ROOT

BASE = Path(ROOT, "deploy", "k8s")


def _docs() -> list[dict[str, Any]]:
    kust = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    docs = []
    for name in kust["resources"]:
        docs += [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]
    listed = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == listed  # nothing left out, nothing missing
    return docs


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_every_workload_is_probed_bounded_and_budgeted() -> None:
    docs = _docs()
    env = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    lease_s = int(env["RSJOBS_LEASE_MS"]) / 1000
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    assert {d["metadata"]["name"] for d in workloads} == {
        "rsjobs-redis", "rsjobs-web", "rsjobs-worker", "rsjobs-reaper"
    }  # fmt: skip
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for w in workloads:
        pod = w["spec"]["template"]
        labels = pod["metadata"]["labels"]
        assert w["spec"]["selector"]["matchLabels"].items() <= labels.items()
        for c in pod["spec"]["containers"]:
            ports = {p["name"] for p in c.get("ports", [])}
            for probe in ("livenessProbe", "readinessProbe"):
                p = c[probe]
                port = (p.get("httpGet") or p.get("tcpSocket") or {}).get("port")
                assert port in ports or "exec" in p, (w["metadata"]["name"], probe)
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
            if c["image"] != "rsjobs":
                continue
            args = c["args"]
            build_parser().parse_args(args)  # a command line the CLI takes
            if args[0] in ("worker", "reaper"):
                assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
                assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
                assert _arg(args, "--metrics-host") == "0.0.0.0"
            if args[0] == "worker":
                grace_s = pod["spec"]["terminationGracePeriodSeconds"]
                assert grace_s > int(_arg(args, "--grace-ms")) / 1000
                assert grace_s >= lease_s and int(_arg(args, "--lease-ms")) / 1000 == lease_s
        if w["kind"] == "Deployment":
            (budget,) = [
                b for b in budgets
                if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
            ]  # fmt: skip
            assert "minAvailable" in budget["spec"] or "maxUnavailable" in budget["spec"]
    redis = next(w for w in workloads if w["kind"] == "StatefulSet")
    assert redis["spec"]["volumeClaimTemplates"]  # its data outlives the pod
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "noeviction" in args and "--appendonly" in args
