"""The rsjobs command line against a real Redis: happy paths and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


def rsjobs(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", "t", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def test_enqueue_status_history_cancel_queues(redis_url: str) -> None:
    out = rsjobs(
        redis_url,
        "enqueue",
        "image.generate",
        "--payload",
        '{"prompt": "fox"}',
        "--queue",
        "gpu",
        "--dedup-key",
        "fox-1",
    )
    assert out.returncode == 0, out.stderr
    tid = out.stdout.strip()
    again = rsjobs(
        redis_url,
        "enqueue",
        "image.generate",
        "--payload",
        '{"prompt": "fox"}',
        "--queue",
        "gpu",
        "--dedup-key",
        "fox-1",
    )
    assert again.stdout.strip() == tid
    # the key with another request is refused (exit 2, one line), as over HTTP
    other = rsjobs(
        redis_url, "enqueue", "image.generate", "--payload", "{}", "--queue", "gpu",
        "--dedup-key", "fox-1",
    )  # fmt: skip
    assert other.returncode == 2 and other.stdout == "", other
    assert other.stderr.strip().splitlines() == [
        f"rsjobs: dedup key 'fox-1' already names task {tid}, submitted with a different "
        "type, queue or payload"
    ]
    status = rsjobs(redis_url, "status", tid)
    assert "PENDING" in status.stdout and "gpu" in status.stdout
    as_json = json.loads(rsjobs(redis_url, "status", tid, "--json").stdout)
    assert as_json["payload"] == {"prompt": "fox"} and as_json["state"] == "PENDING"
    assert (
        rsjobs(redis_url, "cancel", tid, "--reason", "changed my mind").stdout.strip()
        == "CANCELLED"
    )
    assert rsjobs(redis_url, "cancel", tid).stdout.strip() == "CANCELLED"  # idempotent
    hist = rsjobs(redis_url, "history", tid).stdout
    assert "ENQUEUE" in hist and "CANCEL" in hist and "changed my mind" in hist
    assert "REFUSED" in hist  # the repeated cancel is recorded as refused
    queues = json.loads(rsjobs(redis_url, "queues", "--json").stdout)
    assert queues["gpu"]["CANCELLED"] == 1 and queues["gpu"]["stream_length"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("status", "not-an-id"), "invalid task id"),
        (("status", "0" * 32), "no such task"),
        (("enqueue", "x", "--payload", "{bad json"), "not valid JSON"),
        (("enqueue", "x", "--queue", "bad queue!"), "invalid queue"),
        (("enqueue", "x", "--max-attempts", "0"), "max_attempts"),
        (("resume", "0" * 32), "no such task"),
        (("worker", "no_such_module:tasks"), "cannot import"),
        (("worker", "tests.support.apps:nothing"), "has no attribute"),
    ],
)
def test_errors_are_one_line_and_write_nothing(
    redis_url: str, args: tuple[str, ...], message: str
) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    before = r.dbsize()
    out = rsjobs(redis_url, *args)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert r.dbsize() == before


def test_unreachable_redis_is_a_clear_error() -> None:
    out = rsjobs("redis://127.0.0.1:1/0", "queues")
    assert out.returncode == 3 and "cannot reach redis" in out.stderr
    # what failed (the connection), not which internal read met it first
    assert "Connect" in out.stderr and "unavailable" not in out.stderr, out.stderr


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:99999/0",
        "redis://127.0.0.1:6379/0?socket_timeout=abc",
        "redis://127.0.0.1:6379/abc",
        "redis+cluster://127.0.0.1:7000/3",
        "memcached://127.0.0.1:11211",
    ],
)
def test_a_bad_url_is_one_line_and_exit_2(url: str) -> None:
    out = rsjobs(url, "queues")
    assert out.returncode == 2, out
    assert out.stderr.startswith("rsjobs: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr
