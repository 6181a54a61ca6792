// The client against real embedded servers (the built `sediment` binary, SEDIMENT_BIN): every
// call, errors with the API's code, retries that honour Retry-After, and the generated types
// compared with what the served OpenAPI document generates today.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes, randomUUID } from "node:crypto";

import { Client, SedimentError, context } from "../dist/index.js";

const BIN = process.env.SEDIMENT_BIN ?? "/root/.cache/sediment-target/debug/sediment";
const WAIT_MS = 30_000;

async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function startServer(settings = {}) {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "sediment-ts-"));
  const adminKey = randomBytes(24).toString("hex");
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("SEDIMENT_")));
  Object.assign(env, {
    SEDIMENT_LISTEN: `127.0.0.1:${port}`,
    SEDIMENT_DATA_DIR: join(dir, "data"),
    SEDIMENT_ADMIN_KEY: adminKey,
    SEDIMENT_EMBEDDING: "none",
    SEDIMENT_EXTRACT_IDLE_FLUSH_MS: "300",
    SEDIMENT_LOG: "warn",
  });
  for (const [k, v] of Object.entries(settings)) env[`SEDIMENT_${k}`] = v;
  const child = spawn(BIN, [], { env, stdio: "ignore" });
  const base = `http://127.0.0.1:${port}`;
  const started = Date.now();
  for (;;) {
    try {
      if ((await fetch(`${base}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    assert.ok(child.exitCode === null, "sediment exited at start");
    assert.ok(Date.now() - started < 60_000, "sediment did not come up");
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    base,
    async key(team, permission = "write") {
      const response = await fetch(`${base}/v1/admin/keys`, {
        method: "POST",
        headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
        body: JSON.stringify({ team_id: team, permission }),
      });
      assert.equal(response.status, 201);
      return (await response.json()).key;
    },
    async stop() {
      child.kill("SIGTERM");
      await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once("exit", resolve)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function until(fetchValue, ready) {
  const started = Date.now();
  for (;;) {
    const value = await fetchValue();
    if (ready(value)) return value;
    assert.ok(Date.now() - started < WAIT_MS, `never ready: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const team = () => `team-${randomUUID().slice(0, 12)}`;
let server;
let limited;

before(async () => {
  server = await startServer();
  limited = await startServer({ RATE_LIMIT_RPS: "2", RATE_LIMIT_BURST: "2" });
});

after(async () => {
  await server?.stop();
  await limited?.stop();
});

test("the committed types are what the served OpenAPI document generates", () => {
  const out = join(mkdtempSync(join(tmpdir(), "sediment-ts-schema-")), "schema.ts");
  const generated = spawnSync(
    process.execPath,
    ["node_modules/openapi-typescript/bin/cli.js", `${server.base}/openapi.json`, "-o", out],
    { encoding: "utf8" },
  );
  assert.equal(generated.status, 0, generated.stderr);
  assert.equal(
    readFileSync(out, "utf8"),
    readFileSync("src/schema.ts", "utf8"),
    "src/schema.ts is stale: run `SEDIMENT_OPENAPI=<a server>/openapi.json npm run generate`",
  );
});

test("every call round-trips", async () => {
  const memory = new Client({ baseUrl: server.base, apiKey: await server.key(team()), agent: "ts", user: "ana" });
  const appended = await memory.append("ts-1", [
    { role: "user", content: "I am the on-call DBA for the Kestrelton payments cluster." },
    { role: "assistant", content: "Noted: Kestrelton payments run on Postgres 16.", client_id: "a-1" },
  ]);
  assert.deepEqual(
    appended.map((t) => t.seq),
    [1, 2],
  );
  const again = await memory.append("ts-1", [{ role: "assistant", content: "Noted.", client_id: "a-1" }]);
  assert.equal(again[0].id, appended[1].id);
  assert.deepEqual(
    (await memory.turns("ts-1")).map((t) => t.role),
    ["user", "assistant"],
  );
  const found = await until(
    () => memory.search("Kestrelton payments", { strategy: "keyword" }),
    (r) => r.items.some((hit) => hit.content.includes("on-call DBA")),
  );
  assert.equal(found.items[0].session_id, "ts-1");
  const page = await until(
    () => memory.memories(),
    (p) => p.items.some((m) => m.content.includes("DBA")),
  );
  const id = page.items.find((m) => m.content.includes("DBA")).id;
  // Listed from the store at once, searchable once the memory index applied its outbox.
  const hits = await until(
    () => memory.searchMemories("Kestrelton DBA", { limit: 3 }),
    (r) => r.items.length > 0 && r.items[0].id === id,
  );
  assert.equal(hits.items[0].id, id);
  const recalled = await memory.recall("who runs the Kestrelton payments database?", { sessionId: "ts-1" });
  assert.ok(recalled.dynamic.some((item) => item.id === id));
  assert.match(context(recalled), /Kestrelton/);
  assert.equal((await memory.updateMemory(id, { priority: 95 })).priority, 95);
  assert.equal((await memory.memory(id)).priority, 95);
  assert.ok(Array.isArray(await memory.scenes()));
  await memory.deleteMemory(id);
  await assert.rejects(memory.memory(id), (e) => e instanceof SedimentError && e.status === 404 && e.code === "not_found");
  await assert.rejects(memory.persona(), (e) => e.code === "persona_not_found");
});

test("an owner exports and imports", async () => {
  const memory = new Client({ baseUrl: server.base, apiKey: await server.key(team()), agent: "ts", user: "cy" });
  await memory.append("ts-move", [{ role: "user", content: "The Ternwick archive moved to Oslo." }]);
  const stream = await memory.exportOwner();
  const lines = stream.trimEnd().split("\n").map((line) => JSON.parse(line));
  assert.equal(lines[0].kind, "header");
  assert.equal(lines[0].version, 1);
  assert.equal(lines.at(-1).kind, "end");
  assert.equal(lines.at(-1).counts.turn, 1);
  // Into the same owner: everything is already there, so nothing is inserted.
  const again = await memory.importOwner(stream);
  assert.equal(again.lines, lines.length);
  assert.equal(again.read.turn, 1);
  assert.ok(Object.values(again.inserted).every((n) => n === 0), JSON.stringify(again));
  // A stream cut before its end line is refused, with the API's code.
  const cut = stream.trimEnd().split("\n").slice(0, -1).join("\n");
  await assert.rejects(memory.importOwner(cut), (e) => e.status === 422 && e.code === "truncated_import");
});

test("errors carry the API's code", async () => {
  const wrong = new Client({ baseUrl: server.base, apiKey: "sdmk_wrong", agent: "ts", user: "ana" });
  await assert.rejects(wrong.memories(), (e) => e.status === 401 && e.code === "unauthorized");
  const t = team();
  const memory = new Client({ baseUrl: server.base, apiKey: await server.key(t), agent: "ts", user: "ana" });
  await assert.rejects(memory.search("   "), (e) => e.status === 422 && e.code === "invalid_request");
  const reader = new Client({ baseUrl: server.base, apiKey: await server.key(t, "read"), agent: "ts", user: "ana" });
  await assert.rejects(reader.append("ts-1", [{ role: "user", content: "hi" }]), (e) => e.code === "forbidden");
  const nowhere = new Client({ baseUrl: "http://127.0.0.1:9", maxRetries: 1, timeoutMs: 2000 });
  await assert.rejects(nowhere.memories(), (e) => e.status === 0 && e.code === "unreachable");
});

test("a 429 is retried after the wait the API asks", async () => {
  const key = await limited.key(team());
  const impatient = new Client({ baseUrl: limited.base, apiKey: key, agent: "ts", user: "ana", maxRetries: 0 });
  await assert.rejects(
    (async () => {
      for (let i = 0; i < 10; i++) await impatient.memories();
    })(),
    (e) => e.status === 429 && e.code === "rate_limited" && e.retryAfter >= 1,
  );
  const patient = new Client({ baseUrl: limited.base, apiKey: key, agent: "ts", user: "ana", maxRetries: 5 });
  const started = Date.now();
  for (let i = 0; i < 6; i++) await patient.memories();
  // 2 a second with a burst of 2: six calls need about two seconds or more.
  assert.ok(Date.now() - started >= 1500);
});

test("a 503 is retried, then thrown", async () => {
  let calls = 0;
  const stub = createServer((req, res) => {
    calls++;
    req.resume();
    if (calls <= 2) {
      res.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
      res.end('{"code":"backend_unavailable","message":"the store is down"}');
    } else {
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"items":[],"strategy":"keyword","errors":[]}');
    }
  });
  await new Promise((resolve) => stub.listen(0, "127.0.0.1", resolve));
  const base = `http://127.0.0.1:${stub.address().port}`;
  try {
    const started = Date.now();
    assert.deepEqual((await new Client({ baseUrl: base }).search("anything")).items, []);
    assert.equal(calls, 3);
    assert.ok(Date.now() - started >= 2000);
    calls = 0;
    await assert.rejects(
      new Client({ baseUrl: base, maxRetries: 1 }).search("anything"),
      (e) => e.status === 503 && e.code === "backend_unavailable" && e.retryAfter === 1,
    );
  } finally {
    stub.close();
  }
});
