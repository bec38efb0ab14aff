"""schemathesis against the served app: every operation of the OpenAPI document, with
generated valid and invalid input, as an admin and as an owner, on a real Redis.

For every request: no answer is a 5xx; a refused request (4xx) writes nothing to Redis
except what the docs list (a refused workflow action is recorded in that workflow's
history, a refused task action in that task's); and the answer is what the document says (status code, media type, headers,
body schema). Path parameters are drawn from generated ids and from ids seeded into the
database (tasks and workflows, running and finished), so the checks reach past "no such
id". Event streams are only drawn with finished tasks and workflows, whose streams end
(the namespace's stream, ``GET /events``, ends after ``live_stream_ms``).

Bounded: ``EXAMPLES`` per operation and mode, phases examples / coverage / fuzzing.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import redis as sync_redis
import schemathesis
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.config._auth import AuthConfig

from rsjobs import Client, Settings, connect
from rsjobs.names import NAME
from rsjobs.server import free_port
from rsjobs.store.keys import Keys
from rsjobs.web import WebConfig, create_app
from rsjobs.workflows import WorkflowClient
from tests.support.web import ADMIN, NAMESPACE, TOKENS, ServerThread, redis_state
from tests.support.workflows import Hand, character

pytestmark = pytest.mark.integration

#: generated cases per operation and mode: 5 in the suite (a short fuzz), 30 in
#: ``make test-all`` (both tokens together take about 4-7 minutes on 2 cores), more with
#: ``make fuzz`` (RSJOBS_FUZZ_EXAMPLES, default there 100)
EXAMPLES = int(os.environ.get("RSJOBS_FUZZ_EXAMPLES", "5"))
#: the provider callbacks are served (and every generated token or signature is refused:
#: 401, nothing written)
CALLBACK_SECRET = "schemathesis-callback-secret-0123"
KEYS = Keys(NAMESPACE)
#: positive_data_acceptance: valid per the document, yet refused. The document cannot say
#: every rule (backoff_max_ms >= backoff_base_ms, the definitions a server knows, a plan's
#: stage names, an idempotency key reused with another body): those answer a documented
#: 4xx, which status_code_conformance checks.
EXCLUDED = [schemathesis.checks.positive_data_acceptance]
#: what the document says: status code, media type, headers, body
DOCUMENTED = [
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_headers_conformance,
    schemathesis.checks.response_schema_conformance,
]


@dataclass
class Seeds:
    """Ids that exist, for the path parameters schemathesis draws."""

    tasks: list[str] = field(default_factory=list)
    finished_tasks: list[str] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)
    finished_workflows: list[str] = field(default_factory=list)
    #: a workflow with a recorded asset file: (wf_id, version, stage, item)
    asset: tuple[str, int, str, str] = ("", 0, "", "")


SEEDS = Seeds()


async def _seed(url: str, asset_root: Path) -> Seeds:
    """For alice: two tasks (one cancelled), and workflows at a gate, running, finished."""
    seeds = Seeds()
    client = Client.from_url(url, namespace=NAMESPACE)
    wf = WorkflowClient(connect(url), Settings(namespace=NAMESPACE), definitions=[character()])
    try:
        live = await client.enqueue("seed", {"n": 1}, owner="alice")
        done = await client.enqueue("seed", {"n": 2}, owner="alice")
        await client.cancel(done, "seeded")
        seeds.tasks, seeds.finished_tasks = [live, done], [done]
        gated = await wf.start(character(), {"n": 1}, owner="alice")
        hand = Hand(wf.redis, wf.settings)
        asset = asset_root / "params.json"
        asset.write_text('{"seeded": true}')
        for c in await hand.claim():
            await hand.complete(c, {"ref": str(asset)})  # waiting for confirmation now
        running = await wf.start(character(), {"n": 2}, owner="alice")
        ended = await wf.start(character(), {"n": 3}, owner="alice")
        await wf.cancel(ended, "seeded")
        seeds.workflows = [gated, running, ended]
        seeds.finished_workflows = [ended]
        seeds.asset = (gated, 1, "params", "params")
    finally:
        await client.close()
        await wf.close()
    return seeds


@pytest.fixture
def served(redis_url: str, tmp_path: Path) -> Iterator[ServerThread]:
    seeds = asyncio.run(_seed(redis_url, tmp_path))
    SEEDS.__dict__.update(seeds.__dict__)
    app = create_app(redis_url, namespace=NAMESPACE, tokens=TOKENS, admin_token=ADMIN, env={},
                     config=WebConfig(keepalive_ms=200, live_stream_ms=300,
                                      callback_secret=CALLBACK_SECRET),
                     definitions=[character()],
                     asset_root=tmp_path)  # fmt: skip
    server = ServerThread(app).start()
    try:
        yield server
    finally:
        server.stop()


_ID = re.compile(r"[0-9a-f]{32}")
_NAME = NAME


def _valid(value: Any, pattern: re.Pattern[str] = _NAME) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
    """The generated parameters, or the same with seeded ids in place of generated ones
    that are valid (an invalid one is what a negative case is about: it stays)."""
    params = dict(path_parameters or {})
    options = [params]
    path = context.operation.path
    streams = path.endswith("/events")
    for name, ids in (
        ("task_id", SEEDS.finished_tasks if streams else SEEDS.tasks),
        ("wf_id", SEEDS.finished_workflows if streams else SEEDS.workflows),
    ):
        if _valid(params.get(name), _ID):
            options += [{**params, name: i} for i in ids]
    version = params.get("version")
    slot = isinstance(version, int) and not isinstance(version, bool) and version >= 1
    if slot and SEEDS.asset[0] and _valid(params.get("stage")) and _valid(params.get("item")):
        wf_id, v, stage, item = SEEDS.asset
        options.append({**params, "wf_id": wf_id, "version": v, "stage": stage, "item": item})
    return st.sampled_from(options)


def flatmap_body(context: Any, body: Any) -> Any:
    """The generated body, or the same naming what the server knows where it names a
    valid one: the definition it may start, the stages of its plan; and where it names a
    queue, the same naming a queue the namespace does not have yet (each case its own),
    alone and with a predecessor that is no task: a refusal must not register it."""
    options = [body]
    if isinstance(body, dict):
        for name, known in (("definition", ["character"]), ("stage", ["params", "images"])):
            if _valid(body.get(name)):
                options += [{**body, name: k} for k in known]
        op = context.operation
        if "queue" in body or (op.method.upper(), op.path) == ("POST", "/tasks"):
            fresh = st.integers(0, 10**9).map(lambda n: f"fresh{n}")
            return st.one_of(
                st.sampled_from(options),
                fresh.map(lambda q: {**body, "queue": q}),
                fresh.map(lambda q: {**body, "queue": q, "after": [UNKNOWN_ID]}),
            )
    return st.sampled_from(options)


#: a task id no task has
UNKNOWN_ID = "0" * 32


def run_schemathesis(
    url: str,
    token: str,
    exercise: Callable[[Case], None],
    *,
    examples: int,
    modes: tuple[GenerationMode, ...] = tuple(GenerationMode),
) -> list[str]:
    """Every operation of the document served at ``url`` through ``exercise``, with
    ``examples`` generated cases per mode; the failures, one paragraph each."""
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    schema.config.update(base_url=url)
    schema.hook(flatmap_path_parameters)
    schema.hook(flatmap_body)
    # as the scheme of the document, so negative cases may leave it out or spoil it
    schema.config.auth = AuthConfig(openapi={"bearer": {"bearer": token}})
    failures: list[str] = []
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in modes:
            run = hypothesis.settings(
                max_examples=examples,
                deadline=None,
                suppress_health_check=list(hypothesis.HealthCheck),
                derandomize=True,
                database=None,
                phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
                report_multiple_bugs=False,
            )(hypothesis.given(op.as_strategy(generation_mode=mode))(exercise))
            try:
                run()
            except (Exception, BaseExceptionGroup) as exc:
                failures.append(f"{op.label} [{mode.value}]: {type(exc).__name__}: {exc}")
    return failures


@pytest.mark.timeout(max(300, 8 * EXAMPLES))  # 300 s up to test-all's 30
@pytest.mark.parametrize("token", [ADMIN, "tok-alice"], ids=["admin", "owner"])
def test_schemathesis(token: str, served: ServerThread, redis_url: str) -> None:
    rdb = sync_redis.Redis.from_url(redis_url)

    def exercise(case: Case) -> None:
        before = redis_state(rdb)
        response = case.call(timeout=10)
        after = redis_state(rdb)
        if 400 <= response.status_code < 500:
            assert_writes_documented(case, response.status_code, before, after)
        case.validate_response(response, excluded_checks=EXCLUDED)

    try:
        failures = run_schemathesis(served.url, token, exercise, examples=EXAMPLES)
    finally:
        rdb.close()
    assert not failures, "\n\n".join(failures)


@pytest.mark.timeout(300)
def test_schemathesis_while_redis_is_down(tmp_path: Path) -> None:
    """No Redis behind the app: every answer is still documented, and the only 5xx is the
    documented 503 ``redis_unavailable``."""
    app = create_app(f"redis://127.0.0.1:{free_port()}/0", namespace=NAMESPACE, tokens=TOKENS,
                     admin_token=ADMIN, env={}, definitions=[character()],
                     asset_root=tmp_path)  # fmt: skip
    SEEDS.__dict__.update(Seeds().__dict__)
    served: list[int] = []

    def exercise(case: Case) -> None:
        response = case.call(timeout=10)
        if response.status_code >= 500:
            assert response.status_code == 503, response.text
            body = response.json()
            if case.path in ("/healthz", "/readyz"):
                assert body["status"] == "unavailable" and body["redis"] == "unreachable"
            else:
                assert body["error"] == "redis_unavailable"
            served.append(503)
        case.validate_response(response, checks=DOCUMENTED)

    server = ServerThread(app).start()
    try:
        failures = run_schemathesis(server.url, ADMIN, exercise, examples=5,
                                    modes=(GenerationMode.POSITIVE,))  # fmt: skip
    finally:
        server.stop()
    assert not failures, "\n\n".join(failures)
    assert served, "no request reached Redis"


def assert_writes_documented(
    case: Case, status: int, before: dict[bytes, Any], after: dict[bytes, Any]
) -> None:
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    allowed: set[bytes] = set()
    if status == 409 and case.path == "/workflows/{wf_id}/{action}":
        # documented: a refused action is recorded in the workflow's history (and noted on
        # the events stream) and counted
        wf_id = case.path_parameters["wf_id"] if case.path_parameters else ""
        allowed = {k.encode() for k in (KEYS.workflow_history(wf_id), KEYS.events, KEYS.stats)}
    if status == 409 and case.path in TASK_ACTIONS:
        # documented: an action the task's state refuses is recorded in its history (the
        # task hash), noted on the events stream and counted
        task_id = case.path_parameters["task_id"] if case.path_parameters else ""
        allowed = {k.encode() for k in (KEYS.task(task_id), KEYS.events, KEYS.stats)}
    assert changed <= allowed, (case.method, case.path, status, sorted(changed))


#: the task routes whose refusal (409) the state machine records
TASK_ACTIONS = {f"/tasks/{{task_id}}/{a}" for a in ("pause", "resume", "retry", "replay")}
