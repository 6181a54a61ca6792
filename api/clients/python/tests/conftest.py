"""Starts real embedded sediment servers (the binary named by SEDIMENT_BIN) for the tests: one
with auth on, and one with a tight rate limit. Each test makes keys for a team of its own."""

import os
import secrets
import socket
import subprocess
import tempfile
import time
import uuid

import httpx
import pytest

BIN = os.environ.get("SEDIMENT_BIN", "/root/.cache/sediment-target/debug/sediment")


class Server:
    def __init__(self, **settings):
        self.admin_key = secrets.token_hex(24)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.dir = tempfile.TemporaryDirectory()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SEDIMENT_")}
        env.update(
            SEDIMENT_LISTEN=f"127.0.0.1:{port}",
            SEDIMENT_DATA_DIR=os.path.join(self.dir.name, "data"),
            SEDIMENT_ADMIN_KEY=self.admin_key,
            SEDIMENT_EMBEDDING="none",
            SEDIMENT_EXTRACT_IDLE_FLUSH_MS="300",
            SEDIMENT_LOG="warn",
        )
        env.update({f"SEDIMENT_{k}": v for k, v in settings.items()})
        self.log = open(os.path.join(self.dir.name, "server.log"), "wb")
        self.process = subprocess.Popen([BIN], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert self.process.poll() is None, "sediment exited at start"
            time.sleep(0.2)
        raise AssertionError("sediment did not come up")

    def key(self, team, permission="write"):
        response = httpx.post(
            f"{self.base}/v1/admin/keys",
            headers={"authorization": f"Bearer {self.admin_key}"},
            json={"team_id": team, "permission": permission},
        )
        assert response.status_code == 201, response.text
        return response.json()["key"]

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()
        self.dir.cleanup()


@pytest.fixture(scope="session")
def server():
    server = Server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def limited_server():
    server = Server(RATE_LIMIT_RPS="2", RATE_LIMIT_BURST="2")
    yield server
    server.stop()


@pytest.fixture
def team():
    return f"team-{uuid.uuid4().hex[:12]}"
