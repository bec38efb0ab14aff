"""Callback tokens and body signatures (rsjobs.callbacks), no Redis: a token verifies
only under its secret, unaltered and unexpired, and says what it was signed with."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from rsjobs import BadSignature, ConfigError
from rsjobs.callbacks import Claims, body_signature, check_body_signature, sign, verify

SECRET = "a-secret-of-enough-bytes"
CLAIMS = Claims("ns", "a" * 32, "gpu", 3, 2_000_000_000_000)


def test_a_token_verifies_to_its_claims() -> None:
    token = sign(SECRET, CLAIMS)
    assert verify(SECRET, token, now_ms=1) == CLAIMS
    assert "/" not in token and "+" not in token  # URL-safe


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # the signature altered
        lambda t: "x" + t,  # the claims altered
        lambda t: t.replace(".", ""),  # no separator
        lambda t: t.split(".")[0] + ".",  # no signature
        lambda t: t + "." + t,  # garbage around it
        lambda t: "",
    ],
)
def test_an_altered_token_is_refused(mangle: object) -> None:
    token = sign(SECRET, CLAIMS)
    with pytest.raises(BadSignature):
        verify(SECRET, mangle(token))  # type: ignore[operator]


def test_another_secret_or_an_expired_token_is_refused() -> None:
    token = sign(SECRET, CLAIMS)
    with pytest.raises(BadSignature, match="does not verify"):
        verify("another-secret-of-bytes", token, now_ms=1)
    with pytest.raises(BadSignature, match="expired"):
        verify(SECRET, token, now_ms=CLAIMS.expires_at + 1)


def test_a_short_secret_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        sign("short", CLAIMS)


BODY = b'{"status": "succeeded"}'
T0 = 1_700_000_000


def _check(header: str | None, *, provider: str = "acme", job: str = "job-a",
           body: bytes = BODY, now: float = T0 + 10, tolerance_s: int = 300) -> None:  # fmt: skip
    check_body_signature(
        SECRET, provider, job, body, header, tolerance_s=tolerance_s, clock=lambda: now
    )


def test_a_body_signature_verifies_for_its_job_within_the_tolerance() -> None:
    header = body_signature(SECRET, "acme", "job-a", BODY, T0)
    stamp, v1 = header.split(",")
    assert stamp == f"t={T0}" and v1.startswith("v1=") and len(v1) == 3 + 64
    want = hmac.new(SECRET.encode(), f"{T0}.acme/job-a.".encode() + BODY, hashlib.sha256)
    assert v1 == "v1=" + want.hexdigest()  # the documented payload, byte for byte
    _check(header)
    _check(header, now=T0 - 300)
    _check(header, now=T0 + 300)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"job": "job-b"}, "does not verify"),  # a body signed for job A, sent to job B
        ({"provider": "other"}, "does not verify"),
        ({"body": BODY + b" "}, "does not verify"),
        ({"now": T0 + 301}, "301 s old"),
        ({"now": T0 - 301}, "in the future"),
        ({"now": T0 + 61, "tolerance_s": 60}, "old"),
    ],
)
def test_a_body_signature_is_refused_for_another_job_body_or_time(
    change: dict[str, object], reason: str
) -> None:
    header = body_signature(SECRET, "acme", "job-a", BODY, T0)
    with pytest.raises(BadSignature, match=reason):
        _check(header, **change)  # type: ignore[arg-type]


def test_the_provider_and_job_split_one_way() -> None:
    # "a.b" + "c" and "a" + "b.c" would join to the same "a.b.c"
    header = body_signature(SECRET, "a.b", "c", BODY, T0)
    _check(header, provider="a.b", job="c")
    with pytest.raises(BadSignature, match="does not verify"):
        _check(header, provider="a", job="b.c")


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("sha256=" + "0" * 64, "sha256=<hex> form signs the body only"),
        ("v1=" + "0" * 64, "no timestamp"),
        (f"t={T0}", "no v1"),
        (f"t=abc,v1={'0' * 64}", "malformed"),
        (f"t={T0},t={T0},v1={'0' * 64}", "malformed"),
        (f"t={'9' * 400},v1={'0' * 64}", "malformed"),
        ("garbage", "malformed"),
        (f"t={T0},v1=é", "does not verify"),
        (f"t={T0}" + ",v1=00" * 5, "more than 4"),
        ("t=" + "1" * 600, "too long"),
    ],
)
def test_a_malformed_or_old_style_header_is_refused(header: str | None, reason: str) -> None:
    with pytest.raises(BadSignature, match=reason):
        _check(header)


def test_the_old_form_is_refused_even_when_it_signs_the_body() -> None:
    old = "sha256=" + hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()
    with pytest.raises(BadSignature, match="refused"):
        _check(old)


def test_several_v1_values_while_a_secret_rotates() -> None:
    new = body_signature(SECRET, "acme", "job-a", BODY, T0)
    old = body_signature("the-previous-secret-bytes", "acme", "job-a", BODY, T0)
    both = f"t={T0},{old.split(',')[1]},{new.split(',')[1]}"
    _check(both)
    only_old = f"t={T0},{old.split(',')[1]},v0=ignored"
    with pytest.raises(BadSignature, match="does not verify"):
        _check(only_old)
