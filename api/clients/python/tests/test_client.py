"""The client against a real embedded server: every call, sync and async, typed errors with the
API's code, retries that honour Retry-After, and the models checked against /openapi.json."""

import asyncio
import dataclasses
import http.server
import json
import threading
import time

import httpx
import pytest

from sediment_client import (
    AsyncClient,
    Client,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    Unauthorized,
    Unavailable,
    Unreachable,
)
from sediment_client import models

WAIT_S = 30


def until(fetch, ready):
    started = time.monotonic()
    while True:
        value = fetch()
        if ready(value):
            return value
        assert time.monotonic() - started < WAIT_S, f"never ready: {value}"
        time.sleep(0.2)


def properties(doc, schema):
    """A schema's property names, through $ref and allOf (serde's flatten)."""
    if "$ref" in schema:
        return properties(doc, doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    names = set(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        names |= properties(doc, part)
    return names


def test_models_match_the_openapi_document(server):
    doc = httpx.get(f"{server.base}/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for model in models.ALL:
        assert model.SCHEMA in schemas, f"{model.__name__}: no schema {model.SCHEMA} in {sorted(schemas)}"
        fields = {f.name for f in dataclasses.fields(model)}
        assert fields == properties(doc, schemas[model.SCHEMA]), model.__name__


def test_every_call_round_trips(server, team):
    key = server.key(team)
    with Client(server.base, api_key=key, agent="py", user="ana") as memory:
        appended = memory.append(
            "py-1",
            [
                {"role": "user", "content": "I am the on-call DBA for the Ibisford payments cluster."},
                {"role": "assistant", "content": "Noted: Ibisford payments run on Postgres 16.", "client_id": "a-1"},
            ],
        )
        assert [t.seq for t in appended] == [1, 2]
        # A turn sent again with its client_id is stored once.
        again = memory.append("py-1", [{"role": "assistant", "content": "Noted.", "client_id": "a-1"}])
        assert again[0].id == appended[1].id
        turns = memory.turns("py-1")
        assert [t.role for t in turns] == ["user", "assistant"] and turns[0].created_at.tzinfo is not None

        found = until(
            lambda: memory.search("Ibisford payments", strategy="keyword"),
            lambda r: any("on-call DBA" in hit.content for hit in r.items),
        )
        assert found.items[0].session_id == "py-1" and found.items[0].score > 0
        page = until(memory.memories, lambda p: any("DBA" in m.content for m in p.items))
        memory_id = next(m.id for m in page.items if "DBA" in m.content)
        # Listed from the store at once, searchable once the memory index applied its outbox.
        hits = until(
            lambda: memory.search_memories("Ibisford DBA", limit=3),
            lambda r: bool(r.items) and r.items[0].id == memory_id,
        )
        assert hits.strategy == "keyword"
        recalled = memory.recall("who runs the Ibisford payments database?", session_id="py-1")
        assert any(item.id == memory_id for item in recalled.dynamic)
        assert "Ibisford" in recalled.context() and recalled.stable.tools_guide
        corrected = memory.update_memory(memory_id, priority=95)
        assert corrected.priority == 95 and memory.memory(memory_id).priority == 95
        assert isinstance(memory.scenes(), list)
        memory.delete_memory(memory_id)
        with pytest.raises(NotFound) as missing:
            memory.memory(memory_id)
        assert missing.value.code == "not_found" and missing.value.status == 404


async def test_the_async_client_makes_the_same_calls(server, team):
    key = server.key(team)
    async with AsyncClient(server.base, api_key=key, agent="py", user="bo") as memory:
        await memory.append("py-async", [{"role": "user", "content": "The Gannetby offsite is in Porto."}])
        started = time.monotonic()
        while True:
            found = await memory.search("Gannetby offsite", strategy="keyword")
            if found.items:
                break
            assert time.monotonic() - started < WAIT_S
            await asyncio.sleep(0.2)
        assert "Porto" in found.items[0].content
        with pytest.raises(NotFound) as missing:
            await memory.persona()
        assert missing.value.code == "persona_not_found"


def test_an_owner_exports_and_imports(server, team):
    with Client(server.base, api_key=server.key(team), agent="py", user="cy") as memory:
        memory.append("py-move", [{"role": "user", "content": "The Ternwick archive moved to Oslo."}])
        stream = memory.export_owner()
        lines = [json.loads(line) for line in stream.splitlines()]
        assert lines[0]["kind"] == "header" and lines[0]["version"] == 1, lines[0]
        assert lines[-1] == {"kind": "end", "counts": lines[-1]["counts"]} and lines[-1]["counts"]["turn"] == 1
        # Into the same owner: everything is already there, so nothing is inserted.
        again = memory.import_owner(stream)
        assert again.lines == len(lines) and again.read["turn"] == 1 and again.inserted["turn"] == 0, again
        assert not any(again.inserted.values()), again
        # A stream cut before its end line is refused, with the API's code.
        with pytest.raises(InvalidRequest) as cut:
            memory.import_owner("\n".join(stream.splitlines()[:-1]).encode("utf-8"))
        assert (cut.value.code, cut.value.status) == ("truncated_import", 422)


def test_errors_are_typed_with_the_api_code(server, team):
    with Client(server.base, api_key="sdmk_wrong", agent="py", user="ana") as anonymous:
        with pytest.raises(Unauthorized) as e:
            anonymous.memories()
        assert e.value.code == "unauthorized"
    with Client(server.base, api_key=server.key(team), agent="py", user="ana") as memory:
        with pytest.raises(InvalidRequest) as e:
            memory.search("   ")
        assert (e.value.code, e.value.status) == ("invalid_request", 422)
    with Client(server.base, api_key=server.key(team, "read"), agent="py", user="ana") as reader:
        with pytest.raises(Forbidden) as e:
            reader.append("py-1", [{"role": "user", "content": "hi"}])
        assert e.value.code == "forbidden"
    with Client("http://127.0.0.1:9", max_retries=1, timeout=2) as nowhere:
        with pytest.raises(Unreachable):
            nowhere.memories()


def test_429_is_retried_after_the_wait_the_api_asks(limited_server, team):
    key = limited_server.key(team)
    with Client(limited_server.base, api_key=key, agent="py", user="ana", max_retries=0) as impatient:
        with pytest.raises(RateLimited) as e:
            for _ in range(10):
                impatient.memories()
        assert e.value.code == "rate_limited" and e.value.retry_after >= 1
    with Client(limited_server.base, api_key=key, agent="py", user="ana", max_retries=5) as patient:
        started = time.monotonic()
        for _ in range(6):
            patient.memories()
        # 2 a second with a burst of 2: six calls need at least about two seconds.
        assert time.monotonic() - started >= 1.5


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Answers 503 with Retry-After: 1 twice, then a valid search answer."""

    calls = 0

    def do_POST(self):  # noqa: N802 - the http.server API
        type(self).calls += 1
        self.rfile.read(int(self.headers["content-length"]))
        if type(self).calls <= 2:
            body = b'{"code":"backend_unavailable","message":"the store is down"}'
            self.send_response(503)
            self.send_header("retry-after", "1")
        else:
            body = b'{"items":[],"strategy":"keyword","errors":[]}'
            self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_503_is_retried_and_then_raised():
    stub = http.server.HTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{stub.server_address[1]}"
    try:
        with Client(base, max_retries=3) as memory:
            started = time.monotonic()
            assert memory.search("anything").items == []
            assert _Flaky.calls == 3 and time.monotonic() - started >= 2
        _Flaky.calls = 0
        with Client(base, max_retries=1) as memory:
            with pytest.raises(Unavailable) as e:
                memory.search("anything")
            assert (e.value.code, e.value.retry_after) == ("backend_unavailable", 1.0)
    finally:
        stub.shutdown()
