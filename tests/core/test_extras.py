"""The optional parts (rsjobs/extras.py): used without their extra, each says which extra to
install, with a typed error, and the rest keeps working (no Redis needed)."""

from __future__ import annotations

import pytest

from rsjobs import ConfigError, schedules
from rsjobs.extras import MissingExtra, require
from rsjobs.hooks.webhooks import make_webhook
from rsjobs.schedules import Schedule, check, next_tick
from rsjobs.schemas import EnqueueRequest

REQ = EnqueueRequest(type="tick")


def test_require_names_the_extra_of_a_missing_module() -> None:
    require("web", "anything", "json")  # there: nothing raised
    with pytest.raises(MissingExtra, match=r"pip install 'rsjobs\[nope\]'") as caught:
        require("nope", "the nope part", "rsjobs_no_such_module")
    assert isinstance(caught.value, ConfigError) and caught.value.extra == "nope"


def test_cron_schedules_need_the_cron_extra_and_the_others_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schedules, "croniter", None)
    cron = Schedule(name="c", cron="*/5 * * * *", task=REQ)
    with pytest.raises(MissingExtra, match="cron extra"):
        check(cron)
    with pytest.raises(MissingExtra, match="schedule c"):
        next_tick(cron, 0)
    every = Schedule(name="e", every_ms=1000, anchor_ms=10_000, task=REQ)
    check(every)
    assert next_tick(every, 10_500) == 11_000


def test_webhook_urls_are_checked_without_the_hooks_extra() -> None:
    """(the URL check is the standard library's: adding a webhook needs no HTTP client)"""
    ok = make_webhook("w", "https://example.test:8443/hook?x=1", "s" * 16)
    assert ok.url == "https://example.test:8443/hook?x=1"
    for bad in ("ftp://example.test/", "http://", "not a url", "http://exa mple.test/",
                "http://[::1/", "http://h:99999/", "https://h\x00x/"):  # fmt: skip
        with pytest.raises(ConfigError, match="bad webhook URL"):
            make_webhook("w", bad, "s" * 16)
