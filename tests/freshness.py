"""Commit to searchable on an idle server: how long after its append a turn is found.

    SEDIMENT_LISTEN=127.0.0.1:18091 SEDIMENT_DATA_DIR=$(mktemp -d)/data target/release/sediment &
    python3 tests/freshness.py http://127.0.0.1:18091 [SAMPLES]

Each sample appends one turn with a word of its own to a new session, then searches for that
word (the default, hybrid) every 2 ms until the turn comes back, and waits a second before the
next, so the server is idle when each turn arrives. Prints the append's p50 and the time from
the append's answer to the first search that finds the turn. Standard library only; auth off
(the embedded loopback default).
"""

import json
import statistics
import sys
import time
import urllib.request

HEADERS = {
    "content-type": "application/json",
    "x-sediment-team": "freshness",
    "x-sediment-agent": "probe",
    "x-sediment-user": "probe",
}


def post(base, path, body):
    request = urllib.request.Request(base + path, json.dumps(body).encode(), HEADERS)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def main():
    base = sys.argv[1].rstrip("/")
    samples = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    run = int(time.time())
    appends, lags = [], []
    for i in range(samples):
        word = f"zebra{run}x{i}quokka"
        start = time.perf_counter()
        answer = post(base, f"/v1/sessions/fresh-{run}-{i}/messages", {
            "messages": [{"role": "user", "content": f"the {word} note about my garden plans for spring"}]
        })
        committed = time.perf_counter()
        turn = answer["messages"][0]["id"]
        while not any(item["id"] == turn for item in post(base, "/v1/conversations/search", {"query": word, "limit": 5})["items"]):
            time.sleep(0.002)
        lags.append((time.perf_counter() - committed) * 1e3)
        appends.append((committed - start) * 1e3)
        time.sleep(1.0)
    lags.sort()
    print(
        f"{samples} samples: append p50 {statistics.median(appends):.1f} ms; "
        f"commit to searchable p50 {statistics.median(lags):.1f} ms (min {lags[0]:.1f}, max {lags[-1]:.1f})"
    )


if __name__ == "__main__":
    main()
