"""Webhooks: signed deliveries to a local receiver that fails N times, retried with
backoff, logged on the task; bad settings are refused and write nothing."""

from __future__ import annotations

import itertools
import time

import msgspec
import pytest

from rsjobs import Client
from rsjobs.errors import ConfigError
from rsjobs.hooks import HookRunner, make_webhook, sign, verify
from rsjobs.hooks.webhooks import Delivery
from tests.hooks.test_hooks import _drain
from tests.support.receiver import Receiver

SECRET = "s3cret-s3cret-s3cret"


def test_signature_is_hmac_sha256_of_timestamp_dot_body() -> None:
    import hashlib
    import hmac

    body = b'{"a":1}'
    header = sign(SECRET, body, 1_700_000_000)
    mac = hmac.new(SECRET.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={mac}"
    now = int(time.time())
    assert verify(SECRET, body, sign(SECRET, body, now))
    assert not verify(SECRET, body + b" ", sign(SECRET, body, now))
    assert not verify("another-secret-entirely", body, sign(SECRET, body, now))
    assert not verify(SECRET, body, sign(SECRET, body, now - 3600))  # too old: a replay


@pytest.mark.parametrize(
    ("url", "secret", "on"),
    [
        ("ftp://example.invalid/x", SECRET, ["FAILED"]),
        ("http:///nohost", SECRET, ["FAILED"]),
        ("not a url", SECRET, ["FAILED"]),
        ("http://127.0.0.1/x", "short", ["FAILED"]),
        ("http://127.0.0.1/x", SECRET, ["DONE"]),
    ],
)
def test_bad_webhook_settings_are_refused(url: str, secret: str, on: list[str]) -> None:
    with pytest.raises(ConfigError):
        make_webhook("w", url, secret, on)


async def test_a_failing_receiver_gets_retries_with_backoff_then_the_delivery(
    client: Client,
) -> None:
    with Receiver(fail=3) as rx:
        hook = make_webhook(
            "front", rx.url, SECRET, ["CANCELLED"], ["image.*"], backoff_base_ms=200
        )
        await client.store.hooks.put_webhook(hook.name, msgspec.json.encode(hook), hook.on)
        runner = HookRunner(client.store, name="r1", block_ms=10)
        await runner.start()
        try:
            tid = await client.enqueue("image.make", {"n": 1})
            other = await client.enqueue("video.make", {})
            await client.cancel(tid)
            await client.cancel(other)
            await _drain(runner, until=15)
        finally:
            await runner.close()
    reqs = rx.requests
    assert len(reqs) == 4  # 3 failures, then the delivery; nothing for the video
    assert len({r["delivery"] for r in reqs}) == 1
    for r in reqs:
        assert verify(SECRET, r["body"], r["signature"])
        body = msgspec.json.decode(r["body"])
        assert (body["task_id"], body["state"], body["type"]) == (tid, "CANCELLED", "image.make")
    assert [msgspec.json.decode(r["body"])["attempt"] for r in reqs] == [1, 2, 3, 4]
    waits = [b["at"] - a["at"] for a, b in itertools.pairwise(reqs)]
    for n, w in enumerate(waits, start=1):
        assert w >= 0.2 * 2 ** (n - 1) / 2 - 0.02, waits  # equal jitter's lower bound
    log = [msgspec.json.decode(x, type=Delivery) for x in await client.store.hooks.deliveries(tid)]
    assert [(d.attempt, d.status, d.ok) for d in log] == [
        (4, 200, True),
        (3, 500, False),
        (2, 500, False),
        (1, 500, False),
    ]
    assert await client.store.hooks.deliveries(other) == []
    assert await client.store.hooks.dead() == []


async def test_a_receiver_that_always_fails_ends_in_the_dead_letters(client: Client) -> None:
    with Receiver(fail=1000) as rx:
        hook = make_webhook(
            "down", rx.url, SECRET, ["CANCELLED"], max_attempts=3, backoff_base_ms=50
        )
        await client.store.hooks.put_webhook(hook.name, msgspec.json.encode(hook), hook.on)
        runner = HookRunner(client.store, name="r1", block_ms=10)
        await runner.start()
        try:
            tid = await client.enqueue("x", {})
            await client.cancel(tid)
            await _drain(runner, until=10)
        finally:
            await runner.close()
    assert len(rx.requests) == 3
    dead = await client.store.hooks.dead()
    assert [(d.retry.listener, d.retry.task_id, d.retry.attempts) for d in dead] == [
        ("webhook:down", tid, 3)
    ]
    assert dead[0].retry.error == "HTTP 500"


def test_the_cli_refuses_a_bad_webhook_url_and_writes_nothing(redis_url: str) -> None:
    import redis

    from rsjobs.cli import main
    from rsjobs.store import Keys

    k, r = Keys("t"), redis.Redis.from_url(redis_url, decode_responses=True)
    base = ["--url", redis_url, "--namespace", "t", "webhooks", "add"]
    assert main([*base, "w", "ftp://x/y", "--secret", SECRET]) == 2
    assert main([*base, "w", "http://127.0.0.1/y", "--secret", "short"]) == 2
    assert main([*base, "w", "http://127.0.0.1/y", "--secret", SECRET, "--on", "DONE"]) == 2
    assert not r.exists(k.webhooks, k.hooks_on)
    assert main([*base, "w", "http://127.0.0.1/y", "--secret", SECRET]) == 0
    assert r.hget(k.hooks_on, "webhook:w") == "SUCCEEDED,FAILED,CANCELLED,TIMED_OUT"
    assert main(["--url", redis_url, "--namespace", "t", "webhooks", "remove", "w"]) == 0
    assert not r.exists(k.webhooks, k.hooks_on)
    r.close()
