"""Token configuration: env, files (JSON and lines), admin, and refusing to start open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsjobs import ConfigError
from rsjobs.web import Auth, create_app
from rsjobs.web.auth import ANONYMOUS, Principal


def test_env_tokens_and_admin() -> None:
    a = Auth.from_env(
        {"RSJOBS_TOKENS": "t1=alice, t2=bob,t3=ops:admin", "RSJOBS_ADMIN_TOKEN": "root"}
    )
    assert a.authenticate("t1") == Principal(owner="alice")
    assert a.authenticate("t2") == Principal(owner="bob")
    assert a.authenticate("t3") == Principal(owner="ops", admin=True)
    assert a.authenticate("root") == Principal(owner="admin", admin=True)
    assert a.authenticate("nope") is None
    assert a.authenticate(None) is None  # no dev mode: a token is required
    assert len(a) == 4


def test_tokens_file_json_object_and_list(tmp_path: Path) -> None:
    f = tmp_path / "tokens.json"
    f.write_text(json.dumps({"a": "alice", "z": {"owner": "zed", "role": "admin"}}))
    a = Auth.from_env({"RSJOBS_TOKENS_FILE": str(f)})
    assert a.authenticate("a") == Principal(owner="alice")
    assert a.authenticate("z") == Principal(owner="zed", admin=True)
    f.write_text(json.dumps([{"token": "b", "owner": "bob"}, {"token": "c", "owner": "carol"}]))
    a = Auth.from_env({"RSJOBS_TOKENS_FILE": str(f)})
    assert a.authenticate("c") == Principal(owner="carol")


def test_tokens_file_lines(tmp_path: Path) -> None:
    f = tmp_path / "tokens"
    f.write_text("# team tokens\n\nk1=alice\nk2 = bob:admin\n")
    a = Auth.from_env({"RSJOBS_TOKENS_FILE": str(f)})
    assert a.authenticate("k1") == Principal(owner="alice")
    assert a.authenticate("k2") == Principal(owner="bob", admin=True)


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"RSJOBS_TOKENS": "justatoken"}, "TOKEN=OWNER"),
        ({"RSJOBS_TOKENS": "t=al/ice"}, "invalid owner"),
        ({"RSJOBS_TOKENS": "t=alice:root"}, "unknown role"),
        ({"RSJOBS_TOKENS": "t=alice,t=bob"}, "two different owners"),
        ({"RSJOBS_TOKENS_FILE": "/nonexistent/tokens"}, "cannot read"),
    ],
)
def test_bad_token_config_is_refused(env: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Auth.from_env(env)


def test_bad_json_tokens_file(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text('{"a": ')
    with pytest.raises(ConfigError, match="not valid JSON"):
        Auth.from_env({"RSJOBS_TOKENS_FILE": str(f)})
    f.write_text('{"a": 3}')
    with pytest.raises(ConfigError, match="owner name or an object"):
        Auth.from_env({"RSJOBS_TOKENS_FILE": str(f)})


def test_app_refuses_to_start_without_tokens_unless_dev() -> None:
    with pytest.raises(ConfigError, match="no API tokens configured"):
        create_app("redis://127.0.0.1:1", env={})
    # explicitly a local dev run: anonymous requests act as an admin
    app = create_app("redis://127.0.0.1:1", env={}, dev=True)
    assert app.state.rsjobs.auth.authenticate(None) is ANONYMOUS
    app = create_app("redis://127.0.0.1:1", env={"RSJOBS_WEB_DEV": "1"})
    assert app.state.rsjobs.auth.dev
    # tokens from the environment are enough
    app = create_app("redis://127.0.0.1:1", env={"RSJOBS_ADMIN_TOKEN": "x"})
    assert not app.state.rsjobs.auth.dev


def test_owner_visibility_rule() -> None:
    alice = Principal(owner="alice")
    assert alice.may_see("alice")
    assert not alice.may_see("bob")
    assert not alice.may_see("")  # tasks without an owner are for admins only
    assert Principal(owner="ops", admin=True).may_see("bob")
    assert ANONYMOUS.may_see("")
