"""Callback tokens and body signatures (rsjobs.callbacks), no Redis: a token verifies
only under its secret, unaltered and unexpired, and says what it was signed with."""

from __future__ import annotations

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


def test_body_signatures() -> None:
    body = b'{"status": "succeeded"}'
    header = body_signature(SECRET, body)
    assert header.startswith("sha256=") and len(header) == 7 + 64
    check_body_signature(SECRET, body, header)
    for bad in (None, "", "sha256=00", body_signature("another-secret-of-bytes", body)):
        with pytest.raises(BadSignature):
            check_body_signature(SECRET, body, bad)
    with pytest.raises(BadSignature):
        check_body_signature(SECRET, body + b" ", header)
