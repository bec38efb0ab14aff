"""`rsjobs --version`, `rsjobs healthcheck` and the deploy files that use them."""

from __future__ import annotations

import http.server
import importlib.metadata
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import rsjobs
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsjobs", *args], capture_output=True, text=True, timeout=60,
        cwd=ROOT,
    )  # fmt: skip


def test_version_has_one_source() -> None:
    out = run("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"rsjobs {rsjobs.__version__}"
    assert importlib.metadata.version("rsjobs") == rsjobs.__version__
    assert 'dynamic = ["version"]' in Path(ROOT, "pyproject.toml").read_text()


@pytest.fixture
def http_status() -> Iterator[tuple[str, list[int]]]:
    """A loopback HTTP server answering the status in the list (mutable)."""
    status = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/healthz", status
    server.shutdown()
    server.server_close()


def test_healthcheck(redis_url: str, http_status: tuple[str, list[int]]) -> None:
    url, status = http_status
    ok = run("--url", redis_url, "healthcheck", "--http", url)
    assert (ok.returncode, ok.stdout.strip()) == (0, "ok")
    status[0] = 503
    bad = run("--url", redis_url, "healthcheck", "--http", url)
    assert bad.returncode == 1 and "unhealthy" in bad.stdout
    down = run("--url", "redis://:secret@127.0.0.1:1/0", "healthcheck", "--timeout-ms", "500")
    assert down.returncode == 3 and "unhealthy: redis" in down.stdout
    assert "secret" not in down.stdout


def test_deploy_files_run_the_web_app_with_tokens_and_probes() -> None:
    compose = yaml.safe_load(Path(ROOT, "deploy/compose.yaml").read_text())
    web = compose["services"]["web"]
    assert "--dev" not in web["command"]
    assert "RSJOBS_ADMIN_TOKEN" in web["environment"]
    assert web["healthcheck"]["test"][1:3] == ["rsjobs", "healthcheck"]
    docker = Path(ROOT, "Dockerfile").read_text()
    assert 'CMD ["rsjobs", "healthcheck"]' in docker
    assert "--dev" not in Path(ROOT, "deploy/pod.yaml").read_text()
    # every rsjobs process of the pod has liveness and readiness probes on its own server
    pod = yaml.safe_load(Path(ROOT, "deploy/pod.yaml").read_text())
    for c in pod["spec"]["containers"]:
        if c["name"] == "redis":
            continue
        port = c["args"][c["args"].index("--metrics-port") + 1]
        assert c["args"][c["args"].index("--metrics-host") + 1] == "0.0.0.0"
        (named,) = [p for p in c["ports"] if str(p["containerPort"]) == port]
        assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": named["name"]}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": named["name"]}
        assert c["resources"]["requests"] and c["resources"]["limits"]
