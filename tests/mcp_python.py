"""The MCP server through the official Python SDK (`mcp` from PyPI), the client most MCP hosts
and agent frameworks build on: over Streamable HTTP on `/mcp` with a team key, and over stdio
with `sediment mcp --url`. Run by tests/mcp-python.sh, which starts the server and makes the keys.

Environment: SEDIMENT_MCP_BASE (the API), SEDIMENT_MCP_KEY (a write key of the team),
SEDIMENT_MCP_READER (a read key of the same team), SEDIMENT_MCP_BIN (the sediment binary).
"""

import asyncio
import json
import os
import sys
import time
import uuid

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

BASE = os.environ["SEDIMENT_MCP_BASE"]
KEY = os.environ["SEDIMENT_MCP_KEY"]
READER = os.environ["SEDIMENT_MCP_READER"]
BIN = os.environ["SEDIMENT_MCP_BIN"]
TOOLS = {
    "conversation_search", "forget", "get_persona", "list_memories", "list_scenes",
    "memory_search", "read_scene", "recall", "remember",
}
WAIT_S = 40
checks = 0


def check(condition, message):
    global checks
    checks += 1
    if not condition:
        raise AssertionError(message)


def text(result):
    return "\n".join(block.text for block in result.content if getattr(block, "text", None) is not None)


async def ok(client, tool, arguments):
    result = await client.call_tool(tool, arguments)
    check(not result.is_error, f"{tool}: {text(result)}")
    body = text(result)
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return body


async def refused(client, tool, arguments):
    result = await client.call_tool(tool, arguments)
    check(result.is_error, f"{tool} should fail: {text(result)}")
    return text(result)


async def until(client, tool, arguments, ready):
    started = time.monotonic()
    while True:
        answer = await ok(client, tool, arguments)
        if ready(answer):
            return answer
        check(time.monotonic() - started < WAIT_S, f"{tool} never became ready: {answer}")
        await asyncio.sleep(0.2)


def mentions(items, needle):
    return any(needle in (item.get("content") or "") for item in items)


def http(key, user, session):
    headers = {"X-Sediment-Agent": "py-agent", "X-Sediment-User": user, "X-Sediment-Session": session}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return Client(streamable_http_client(f"{BASE}/mcp", http_client=httpx2.AsyncClient(headers=headers)))


async def over_http():
    user = f"py-{uuid.uuid4().hex[:8]}"
    async with http(KEY, user, "py-session") as client:
        check(client.server_info.name == "sediment", f"server info: {client.server_info}")
        tools = (await client.list_tools()).tools
        check({tool.name for tool in tools} == TOOLS, f"tools: {[t.name for t in tools]}")
        for tool in tools:
            check(tool.input_schema.get("type") == "object", f"{tool.name}: {tool.input_schema}")
            check(len(tool.description or "") > 40, f"{tool.name}: no description")

        remembered = await ok(client, "remember", {"messages": [
            {"role": "user", "content": "I am the on-call DBA for the Pelicanburg ledger cluster."},
            {"role": "assistant", "content": "Noted: the Pelicanburg ledger runs on Postgres 16."},
        ]})
        check(remembered["session_id"] == "py-session" and len(remembered["messages"]) == 2, remembered)
        found = await until(client, "conversation_search", {"query": "Pelicanburg ledger", "strategy": "keyword"},
                            lambda a: mentions(a["items"], "on-call DBA"))
        check(found["items"][0]["session_id"] == "py-session", found)
        memories = await until(client, "list_memories", {}, lambda a: mentions(a["items"], "DBA"))
        memory = next(m for m in memories["items"] if "DBA" in m["content"])
        # Listed from the store at once, searchable once the memory index applied its outbox.
        searched = await until(client, "memory_search", {"query": "Pelicanburg DBA", "limit": 3},
                               lambda a: bool(a["items"]) and a["items"][0]["id"] == memory["id"])
        check(searched["items"][0]["id"] == memory["id"], searched)
        recalled = await ok(client, "recall", {"query": "who runs the Pelicanburg ledger database?"})
        check(any(item["id"] == memory["id"] for item in recalled["dynamic"]), recalled)
        scenes = await ok(client, "list_scenes", {})
        check(isinstance(scenes["items"], list), scenes)
        # Before the persona is built the tool says so, with the API's code.
        persona = await client.call_tool("get_persona", {})
        check(not persona.is_error or "persona_not_found (404)" in text(persona), text(persona))
        error = await refused(client, "read_scene", {"scene_id": "no-such-scene"})
        check("404" in error, error)
        error = await refused(client, "memory_search", {"query": "  "})
        check(error.startswith("invalid_request (422)"), error)
        resources = await client.list_resources()
        check(any(str(r.uri) == "sediment://persona" for r in resources.resources), resources)
        forgotten = await ok(client, "forget", {"memory_id": memory["id"]})
        check(forgotten == {"forgotten": memory["id"]}, forgotten)
        after = await ok(client, "list_memories", {})
        check(all(m["id"] != memory["id"] for m in after["items"]), after)

    async with http(READER, user, "py-session") as reader:
        error = await refused(reader, "remember", {"messages": [{"role": "user", "content": "hi"}]})
        check(error.startswith("forbidden (403)"), error)

    # No key: the endpoint refuses the connection, as /v1 does.
    served = False
    try:
        async with http(None, user, "py-session") as anonymous:
            await anonymous.list_tools()
            served = True
    except Exception:  # noqa: BLE001 - the SDK wraps the 401 in its own exception types
        pass
    check(not served, "an unauthenticated MCP client was served")
    raw = httpx2.post(f"{BASE}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    check(raw.status_code == 401 and "www-authenticate" in raw.headers, f"{raw.status_code} {raw.headers}")


async def over_stdio():
    user = f"py-{uuid.uuid4().hex[:8]}"
    params = StdioServerParameters(
        command=BIN,
        args=["mcp", "--url", BASE],
        env={"SEDIMENT_API_KEY": KEY, "SEDIMENT_AGENT": "py-agent", "SEDIMENT_USER": user, "SEDIMENT_LOG": "warn"},
    )
    async with Client(stdio_client(params)) as client:
        tools = (await client.list_tools()).tools
        check({tool.name for tool in tools} == TOOLS, f"tools: {[t.name for t in tools]}")
        remembered = await ok(client, "remember", {"messages": [
            {"role": "user", "content": "My heron Quillfeather fishes at dawn."}]})
        check(remembered["session_id"].startswith("mcp-"), remembered)
        await until(client, "conversation_search", {"query": "Quillfeather", "strategy": "keyword"},
                    lambda a: mentions(a["items"], "dawn"))


async def main():
    await over_http()
    await over_stdio()
    print(f"mcp-python: {checks} checks passed")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as e:
        print(f"mcp-python: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
