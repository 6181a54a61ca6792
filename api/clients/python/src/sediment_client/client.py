"""`Client` and `AsyncClient`: the same calls, blocking or awaited, over httpx.

Both send the credential and the tenant headers on every call, raise a typed exception carrying
the API's `code` for every error answer (`errors.py`), and retry 429 and 503 answers (and
connection failures) up to `max_retries` times, waiting what `Retry-After` asks, else an
exponential backoff. Retrying is safe for every call here: a 429 or 503 means the API stored
nothing, and appended turns that carry a `client_id` are idempotent besides.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple
from urllib.parse import quote

import httpx

from . import errors
from .models import (
    AppendedTurn,
    ImportResult,
    Memory,
    MemoryPage,
    MemorySearchResult,
    Persona,
    RecallResult,
    Scene,
    SceneDetail,
    SearchResult,
    Turn,
)


#: Longest wait between retries, in seconds, whatever `Retry-After` says.
MAX_WAIT_S = 30.0

Message = Mapping[str, Any]


#: The media type of an export stream.
NDJSON = "application/x-ndjson"


def _segment(value: str) -> str:
    return quote(value, safe="")


def _drop_none(values: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class _Call:
    """One API call: what to send and how to read the answer."""

    def __init__(
        self,
        method: str,
        path: str,
        parse: Callable[[Any], Any],
        json: Any = None,
        params: Any = None,
        content: Optional[bytes] = None,
        raw: bool = False,
    ):
        self.method = method
        self.path = path
        self.parse = parse
        self.json = json
        self.params = params
        #: A body that is not JSON (an export stream), sent as NDJSON.
        self.content = content
        #: The answer is text, not JSON (an export stream).
        self.raw = raw

    def request(self) -> Dict[str, Any]:
        """The keyword arguments of httpx's `request` for this call."""
        if self.content is not None:
            return {"content": self.content, "params": self.params, "headers": {"content-type": NDJSON}}
        return {"json": self.json, "params": self.params}


def _error(response: httpx.Response) -> errors.SedimentError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    retry_after = None
    header = response.headers.get("retry-after")
    if header is not None:
        try:
            retry_after = float(header)
        except ValueError:
            retry_after = None
    return errors.error_for(
        response.status_code,
        str(body.get("code") or f"http_{response.status_code}"),
        str(body.get("message") or response.text[:200]),
        retry_after,
    )


def _wait(attempt: int, error: errors.SedimentError) -> Optional[float]:
    """Seconds to wait before retry number `attempt`, or None when `error` is not retried."""
    if not isinstance(error, (errors.RateLimited, errors.Unavailable, errors.Unreachable)):
        return None
    if error.retry_after is not None:
        return min(error.retry_after, MAX_WAIT_S)
    return min(0.25 * 2**attempt, MAX_WAIT_S)


class _Calls:
    """The calls, as data; `Client` and `AsyncClient` send them."""

    def append(
        self,
        session_id: str,
        messages: Iterable[Message],
        *,
        task: Optional[str] = None,
    ) -> _Call:
        body = _drop_none({"messages": [dict(m) for m in messages], "task": task})
        return _Call(
            "POST",
            f"/v1/sessions/{_segment(session_id)}/messages",
            lambda b: [AppendedTurn.from_dict(t) for t in b["messages"]],
            json=body,
        )

    def turns(self, session_id: str, *, after_seq: Optional[int] = None, limit: Optional[int] = None) -> _Call:
        return _Call(
            "GET",
            f"/v1/sessions/{_segment(session_id)}/messages",
            lambda b: [Turn.from_dict(t) for t in b["messages"]],
            params=_drop_none({"after_seq": after_seq, "limit": limit}),
        )

    def search(
        self,
        query: str,
        *,
        limit: Optional[int] = None,
        session_id: Optional[str] = None,
        strategy: Optional[str] = None,
        task: Optional[str] = None,
    ) -> _Call:
        body = _drop_none(
            {"query": query, "limit": limit, "session_id": session_id, "strategy": strategy, "task": task}
        )
        return _Call("POST", "/v1/conversations/search", SearchResult.from_dict, json=body)

    def recall(
        self,
        query: str,
        *,
        session_id: Optional[str] = None,
        limit: Optional[int] = None,
        strategy: Optional[str] = None,
        task: Optional[str] = None,
        timeout_ms: Optional[int] = None,
    ) -> _Call:
        body = _drop_none(
            {
                "query": query,
                "session_id": session_id,
                "limit": limit,
                "strategy": strategy,
                "task": task,
                "timeout_ms": timeout_ms,
            }
        )
        return _Call("POST", "/v1/recall", RecallResult.from_dict, json=body)

    def search_memories(
        self, query: str, *, limit: Optional[int] = None, strategy: Optional[str] = None, task: Optional[str] = None
    ) -> _Call:
        body = _drop_none({"query": query, "limit": limit, "strategy": strategy, "task": task})
        return _Call("POST", "/v1/memories/search", MemorySearchResult.from_dict, json=body)

    def memories(
        self,
        *,
        category: Optional[str] = None,
        status: Optional[str] = None,
        session_id: Optional[str] = None,
        task: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> _Call:
        params = _drop_none(
            {
                "category": category,
                "status": status,
                "session_id": session_id,
                "task": task,
                "limit": limit,
                "cursor": cursor,
            }
        )
        return _Call("GET", "/v1/memories", MemoryPage.from_dict, params=params)

    def memory(self, memory_id: str) -> _Call:
        return _Call("GET", f"/v1/memories/{_segment(memory_id)}", Memory.from_dict)

    def update_memory(self, memory_id: str, **changes: Any) -> _Call:
        return _Call("PATCH", f"/v1/memories/{_segment(memory_id)}", Memory.from_dict, json=changes)

    def delete_memory(self, memory_id: str) -> _Call:
        return _Call("DELETE", f"/v1/memories/{_segment(memory_id)}", lambda b: None)

    def scenes(self) -> _Call:
        return _Call("GET", "/v1/scenes", lambda b: [Scene.from_dict(s) for s in b["items"]])

    def scene(self, scene_id: str) -> _Call:
        return _Call("GET", f"/v1/scenes/{_segment(scene_id)}", SceneDetail.from_dict)

    def persona(self) -> _Call:
        return _Call("GET", "/v1/persona", Persona.from_dict)

    def export_owner(self) -> _Call:
        return _Call("GET", "/v1/export", str, raw=True)

    def import_owner(self, stream: Any) -> _Call:
        content = stream.encode("utf-8") if isinstance(stream, str) else bytes(stream)
        return _Call("POST", "/v1/import", ImportResult.from_dict, content=content)


class _Base:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: Optional[str] = None,
        team: Optional[str] = None,
        agent: Optional[str] = None,
        user: Optional[str] = None,
        task: Optional[str] = None,
        max_retries: int = 3,
    ):
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        headers = {
            "authorization": f"Bearer {api_key}" if api_key else None,
            "x-sediment-team": team,
            "x-sediment-agent": agent,
            "x-sediment-user": user,
            "x-sediment-task": task,
        }
        self.headers = {k: v for k, v in headers.items() if v is not None}
        self._calls = _Calls()

    @staticmethod
    def _read(call: _Call, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise _error(response)
        if call.raw:
            return call.parse(response.text)
        return call.parse(response.json() if response.content else None)


class Client(_Base):
    """A blocking client. Use it as a context manager, or call `close()`."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", *, timeout: float = 30.0, **options: Any):
        super().__init__(base_url, **options)
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call) -> Any:
        attempt = 0
        while True:
            try:
                response = self._http.request(call.method, call.path, **call.request())
                return self._read(call, response)
            except httpx.TransportError as e:
                error: errors.SedimentError = errors.Unreachable(0, "unreachable", str(e))
            except errors.SedimentError as e:
                error = e
            wait = _wait(attempt, error)
            if wait is None or attempt >= self.max_retries:
                raise error
            attempt += 1
            time.sleep(wait)

    def append(self, session_id: str, messages: Iterable[Message], *, task: Optional[str] = None) -> List[AppendedTurn]:
        """Appends turns (`{"role", "content", "metadata"?, "client_id"?, "created_at"?}`) in order."""
        return self._send(self._calls.append(session_id, messages, task=task))

    def turns(self, session_id: str, *, after_seq: Optional[int] = None, limit: Optional[int] = None) -> List[Turn]:
        return self._send(self._calls.turns(session_id, after_seq=after_seq, limit=limit))

    def search(self, query: str, **options: Any) -> SearchResult:
        """Conversation search: `limit`, `session_id`, `strategy` (keyword, semantic, hybrid), `task`."""
        return self._send(self._calls.search(query, **options))

    def recall(self, query: str, **options: Any) -> RecallResult:
        """What to inject before an LLM call: `session_id`, `limit`, `strategy`, `task`, `timeout_ms`."""
        return self._send(self._calls.recall(query, **options))

    def search_memories(self, query: str, **options: Any) -> MemorySearchResult:
        return self._send(self._calls.search_memories(query, **options))

    def memories(self, **filters: Any) -> MemoryPage:
        """A page of memories: `category`, `status`, `session_id`, `task`, `limit`, `cursor`."""
        return self._send(self._calls.memories(**filters))

    def memory(self, memory_id: str) -> Memory:
        return self._send(self._calls.memory(memory_id))

    def update_memory(self, memory_id: str, **changes: Any) -> Memory:
        """A correction: `content`, `category`, `priority`, `scene`, `occurred_at`."""
        return self._send(self._calls.update_memory(memory_id, **changes))

    def delete_memory(self, memory_id: str) -> None:
        return self._send(self._calls.delete_memory(memory_id))

    def scenes(self) -> List[Scene]:
        return self._send(self._calls.scenes())

    def scene(self, scene_id: str) -> SceneDetail:
        return self._send(self._calls.scene(scene_id))

    def persona(self) -> Persona:
        return self._send(self._calls.persona())

    def export_owner(self) -> str:
        """The owner's whole memory as an export stream (JSONL, format version 1), for
        `import_owner` here or on another sediment. Check that its last line is the `end` line."""
        return self._send(self._calls.export_owner())

    def import_owner(self, stream: Any) -> ImportResult:
        """Loads an export stream (`str` or `bytes`) for the owner, in one transaction."""
        return self._send(self._calls.import_owner(stream))


class AsyncClient(_Base):
    """The same calls as `Client`, awaited. Use it as an async context manager, or `await aclose()`."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", *, timeout: float = 30.0, **options: Any):
        super().__init__(base_url, **options)
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=timeout)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:
        attempt = 0
        while True:
            try:
                response = await self._http.request(call.method, call.path, **call.request())
                return self._read(call, response)
            except httpx.TransportError as e:
                error: errors.SedimentError = errors.Unreachable(0, "unreachable", str(e))
            except errors.SedimentError as e:
                error = e
            wait = _wait(attempt, error)
            if wait is None or attempt >= self.max_retries:
                raise error
            attempt += 1
            await asyncio.sleep(wait)

    async def append(
        self, session_id: str, messages: Iterable[Message], *, task: Optional[str] = None
    ) -> List[AppendedTurn]:
        return await self._send(self._calls.append(session_id, messages, task=task))

    async def turns(self, session_id: str, *, after_seq: Optional[int] = None, limit: Optional[int] = None) -> List[Turn]:
        return await self._send(self._calls.turns(session_id, after_seq=after_seq, limit=limit))

    async def search(self, query: str, **options: Any) -> SearchResult:
        return await self._send(self._calls.search(query, **options))

    async def recall(self, query: str, **options: Any) -> RecallResult:
        return await self._send(self._calls.recall(query, **options))

    async def search_memories(self, query: str, **options: Any) -> MemorySearchResult:
        return await self._send(self._calls.search_memories(query, **options))

    async def memories(self, **filters: Any) -> MemoryPage:
        return await self._send(self._calls.memories(**filters))

    async def memory(self, memory_id: str) -> Memory:
        return await self._send(self._calls.memory(memory_id))

    async def update_memory(self, memory_id: str, **changes: Any) -> Memory:
        return await self._send(self._calls.update_memory(memory_id, **changes))

    async def delete_memory(self, memory_id: str) -> None:
        return await self._send(self._calls.delete_memory(memory_id))

    async def scenes(self) -> List[Scene]:
        return await self._send(self._calls.scenes())

    async def scene(self, scene_id: str) -> SceneDetail:
        return await self._send(self._calls.scene(scene_id))

    async def persona(self) -> Persona:
        return await self._send(self._calls.persona())

    async def export_owner(self) -> str:
        return await self._send(self._calls.export_owner())

    async def import_owner(self, stream: Any) -> ImportResult:
        return await self._send(self._calls.import_owner(stream))


__all__: Tuple[str, ...] = ("Client", "AsyncClient")
