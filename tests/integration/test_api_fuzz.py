"""The generative pass (RELIABILITY.md 3.5): Schemathesis generates requests from the app's own
OpenAPI description, valid ones and invalid ones, for every operation, authenticated as acme's
admin. Whatever it sends: no 5xx, and every error is JSON with `error` and `message`.

The app runs on this test's event loop, around the test's pool (its connections belong to that
loop). Schemathesis's own ASGI transport would run the app on a loop of its own, so requests are
bridged instead: Hypothesis runs in a worker thread, and each request it makes is handed to an
httpx client on this loop. The schema is the app's `openapi()`, the same document
`GET /openapi.json` serves.
"""

from __future__ import annotations

import asyncio
import io
import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import requests
import requests.adapters
import schemathesis
import urllib3
from hypothesis import HealthCheck, Phase, given, settings, strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import (content_type_conformance, not_a_server_error,
                                 response_schema_conformance, status_code_conformance)

from tickwork.scheduler.api.app import create_app

BASE_URL = "http://tickwork.test"
# Per operation and generation mode: 50 makes ~2,200 requests (the smoke tier's 2,000), about
# 30 s on 2 cores; the soak tier sets TICKWORK_FUZZ_EXAMPLES=500 for ~20,000.
EXAMPLES_PER_OPERATION = int(os.environ.get("TICKWORK_FUZZ_EXAMPLES", "50"))
REQUEST_SECONDS = 20  # a request that takes longer is reported as hung, not waited on
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
# Reported, not asserted: the OpenAPI description does not list every 4xx the app returns.
CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance]
# Ids of real objects: generated path ids are almost always unknown (404), so about half the
# cases get one of these instead and reach the code behind the lookup.
SEEDED = ("agent_id", "schedule_id", "run_id", "approval_id")


class LoopBridge(requests.adapters.HTTPAdapter):
    """A requests adapter that sends each request through an httpx client on another thread's
    event loop and hands back an ordinary requests.Response."""

    def __init__(self, client: httpx.AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.client, self.loop = client, loop

    def send(self, request: requests.PreparedRequest, *_: Any, **__: Any) -> requests.Response:
        body = request.body.encode() if isinstance(request.body, str) else request.body
        what = f"{request.method} {request.url} with body {body!r:.500}"
        coro = asyncio.wait_for(self.client.request(request.method, request.url, content=body,
                                                    headers=dict(request.headers)),
                                REQUEST_SECONDS)
        try:
            reply = asyncio.run_coroutine_threadsafe(coro, self.loop).result()
        except TimeoutError:
            raise AssertionError(f"{what}: no complete response in {REQUEST_SECONDS} s") from None
        except Exception as exc:  # the transport re-raises what the app did not handle: a 500
            raise AssertionError(f"{what} raised in the app (a 500 in production): "
                                 f"{type(exc).__name__}: {exc}") from exc
        raw = urllib3.HTTPResponse(body=io.BytesIO(reply.content),
                                   headers=list(reply.headers.items()), status=reply.status_code,
                                   reason=reply.reason_phrase, version=11,
                                   preload_content=False, decode_content=False)
        return self.build_response(request, raw)


def error_is_json_with_a_sentence(response: schemathesis.Response) -> None:
    if response.status_code < 400:
        return
    what = f"{response.request.method} {response.request.url} -> {response.status_code}"
    content_type = {k.lower(): v for k, v in response.headers.items()}.get("content-type", [""])
    assert content_type[0].startswith("application/json"), (
        f"{what}: the error is not JSON: {response.content[:300]!r}")
    body = response.json()
    assert isinstance(body, dict) and {"error", "message"} <= set(body), f"{what}: {body!r:.300}"
    assert isinstance(body["message"], str) and body["message"], f"{what}: {body!r:.300}"


@dataclass
class FuzzReport:
    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    undocumented: dict[str, set[str]] = field(default_factory=dict)

    def note_conformance(self, case, response) -> None:
        try:
            case.validate_response(response, checks=CONFORMANCE)
        except BaseExceptionGroup as exc:  # FailureGroup: what the description does not say
            titles = {getattr(f, "title", type(f).__name__) + f" ({response.status_code})"
                      for f in getattr(exc, "exceptions", [exc])}
            label = f"{case.operation.method.upper()} {case.operation.path}"
            self.undocumented.setdefault(label, set()).update(titles)


def fuzz_operation(operation, mode, session: requests.Session, auth: dict[str, str],
                   seeds: dict[str, str], report: FuzzReport) -> None:
    """Hypothesis over one operation in one generation mode; a failure is shrunk, then kept."""
    reals = st.one_of(st.none(), st.sampled_from(SEEDED))
    # The journal's JSON form: a live SSE tail of a seeded run that never ends would only time out.
    extra = {"Accept": "application/json"} if operation.path.endswith("/events") else {}

    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
              database=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate, Phase.shrink])
    @given(case=operation.as_strategy(generation_mode=mode), real=reals)
    def exercise(case, real):
        if real is not None and case.path_parameters and real in case.path_parameters:
            case.path_parameters[real] = seeds[real]
        response = case.call(base_url=BASE_URL, session=session, headers={**auth, **extra})
        report.requests += 1
        report.statuses[response.status_code] = report.statuses.get(response.status_code, 0) + 1
        case.validate_response(response, checks=[not_a_server_error], headers=auth)
        error_is_json_with_a_sentence(response)
        report.note_conformance(case, response)

    label = f"{operation.method.upper()} {operation.path} ({mode.value})"
    try:
        exercise()
    except Unsatisfiable:  # an operation without inputs has nothing to make invalid
        report.skipped.append(label)
    except (Exception, BaseExceptionGroup) as exc:  # keep it; go on with the other operations
        report.failures.append(f"{label}\n{exc}")


def fuzz_schema(schema, session: requests.Session, auth: dict[str, str],
                seeds: dict[str, str]) -> FuzzReport:
    report = FuzzReport()
    operations = [result.ok() for result in schema.get_all_operations()]
    # Deletions last, so the seeded objects stay in place for every other operation.
    operations.sort(key=lambda op: op.method.upper() == "DELETE")
    for operation in operations:
        for mode in MODES:
            fuzz_operation(operation, mode, session, auth, seeds, report)
    return report


async def seed(client: httpx.AsyncClient, db_url: str) -> dict[str, str]:
    """One agent, schedule, run and pending approval of acme, to aim generated ids at."""
    agent = (await client.post("/v1/agents", json={"name": "fuzz-seed",
                                                   "tools": ["demo.get_record"]})).json()
    schedule = (await client.post("/v1/schedules", json={"agent_id": agent["id"],
                                                          "cron": "0 9 * * *"})).json()
    run = (await client.post(f"/v1/agents/{agent['id']}/runs", json={"input": {}})).json()
    approval_id = f"{run['id']}:call-1"
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO approvals (id, tenant_id, execution_id, tool_call_id, tool)"
            " SELECT %s, tenant_id, id, 'call-1', 'demo.send_message' FROM executions"
            " WHERE id = %s", (approval_id, run["id"]))
    return {"agent_id": agent["id"], "schedule_id": schedule["id"], "run_id": run["id"],
            "approval_id": approval_id}


async def test_generated_requests_never_get_a_server_error(pool, settings, tokens, db_url):
    app = create_app(settings, pool=pool)
    schema = schemathesis.openapi.from_dict(app.openapi())
    auth = {"Authorization": f"Bearer {tokens['acme']}"}
    started = time.monotonic()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL,
                                 headers=auth) as client:
        seeds = await seed(client, db_url)
        session = requests.Session()
        session.mount("http://", LoopBridge(client, asyncio.get_running_loop()))
        report = await asyncio.to_thread(fuzz_schema, schema, session, auth, seeds)
        health = await client.get("/healthz")
    elapsed = time.monotonic() - started
    print(f"\nfuzz: {report.requests} requests in {elapsed:.1f} s; statuses "
          f"{dict(sorted(report.statuses.items()))}; nothing to make invalid in {report.skipped}")
    for label, titles in sorted(report.undocumented.items()):
        print(f"  not in the OpenAPI description: {label}: {'; '.join(sorted(titles))}")
    assert not report.failures, "\n\n".join(report.failures)
    assert all(label.endswith("(negative)") for label in report.skipped), report.skipped
    assert report.requests >= 20 * EXAMPLES_PER_OPERATION, report.statuses
    assert health.status_code == 200, "the app is not healthy after the fuzzing"
