#!/usr/bin/env python3
"""Writes the Grafana dashboard the chart ships, helm/sediment/dashboards/sediment.json.

The dashboard is kept as this program rather than as hand-edited JSON: panels are short to read
and review here. Edit this file, run it, and commit both; validate.py fails when the JSON is not
what this program writes, and checks every query's PromQL and metric names.

Usage: dashboard.py [--check]   (--check: exit 1 if the JSON is out of date, write nothing)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "sediment" / "dashboards" / "sediment.json"

DS = {"type": "prometheus", "uid": "${datasource}"}
NS = 'namespace=~"$namespace"'
RATE = "$__rate_interval"


def sel(metric: str, matchers: str = "") -> str:
    """`metric{namespace=~"$namespace", <matchers>}`."""
    return f"{metric}{{{NS}{', ' + matchers if matchers else ''}}}"


def rate(metric: str, matchers: str = "", by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({sel(metric, matchers)}[{RATE}]))"


def quantile(q: float, histogram: str, matchers: str = "", by: str = "") -> str:
    grouping = ", ".join(x for x in ("le", by) if x)
    return f"histogram_quantile({q}, sum by ({grouping}) (rate({sel(histogram + '_bucket', matchers)}[{RATE}])))"


class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping into new lines."""

    def __init__(self) -> None:
        self.panels: list[dict] = []
        self.x = self.y = 0
        self.line_height = 0
        self.next_id = 1

    def _place(self, panel: dict, w: int, h: int) -> None:
        if self.x + w > 24:
            self.x, self.y = 0, self.y + self.line_height
            self.line_height = 0
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": w, "h": h}
        panel["id"] = self.next_id
        self.next_id += 1
        self.x += w
        self.line_height = max(self.line_height, h)
        self.panels.append(panel)

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y = 0, self.y + self.line_height
        self.line_height = 0
        self._place({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
        self.x, self.y, self.line_height = 0, self.y + 1, 0

    def panel(
        self,
        kind: str,
        title: str,
        description: str,
        targets: list[tuple[str, str]],
        unit: str = "short",
        w: int = 8,
        h: int = 8,
        stack: bool = False,
        instant: bool = False,
    ) -> None:
        panel = {
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "targets": [
                {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend, "instant": instant, "range": not instant}
                for i, (expr, legend) in enumerate(targets)
            ],
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {},
        }
        if kind == "timeseries":
            panel["fieldConfig"]["defaults"]["custom"] = {
                "drawStyle": "line",
                "fillOpacity": 25 if stack else 10,
                "stacking": {"mode": "normal" if stack else "none"},
                "showPoints": "never",
            }
            panel["options"] = {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]}, "tooltip": {"mode": "multi"}}
        elif kind == "piechart":
            panel["options"] = {"pieType": "donut", "legend": {"displayMode": "table", "placement": "right", "values": ["value", "percent"]}, "reduceOptions": {"calcs": ["lastNotNull"]}}
        elif kind == "stat":
            panel["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value", "graphMode": "area"}
        self._place(panel, w, h)


def build() -> dict:
    d = Layout()

    d.row("Queues and lag")
    d.panel(
        "timeseries", "Ready messages per queue",
        "Messages waiting in each worker queue (sediment_queue_depth), as the API reads them at every scrape and each worker at every sweep; the highest reading per queue.",
        [(f"max by (queue) ({sel('sediment_queue_depth')})", "{{queue}}")],
    )
    d.panel(
        "timeseries", "Parked messages per queue",
        "Messages rejected or out of attempts, kept in {prefix}.{queue}.parked for a human (sediment_parked_messages); anything above 0 fires SedimentMessagesParked.",
        [(f"max by (queue) ({sel('sediment_parked_messages')})", "{{queue}}")],
    )
    d.panel(
        "timeseries", "Consumers per queue",
        "Subscriptions on each worker queue, across every pod (sediment_queue_consumers): one per worker replica, plus the API's in-process workers.",
        [(f"max by (queue) ({sel('sediment_queue_consumers')})", "{{queue}}")],
    )
    d.panel(
        "timeseries", "Turns waiting to be indexed",
        "Turns stored but not yet in the search index, and the sessions they belong to, as of each index worker's last sweep.",
        [
            (f"max by (pod) ({sel('sediment_index_lag_turns')})", "turns {{pod}}"),
            (f"max by (pod) ({sel('sediment_index_lag_sessions')})", "sessions {{pod}}"),
        ],
    )
    d.panel(
        "timeseries", "Turns waiting for L1 extraction",
        "Turns past the extraction cursor, and the sessions they belong to, as of each extract worker's last sweep.",
        [
            (f"max by (pod) ({sel('sediment_extract_lag_turns')})", "turns {{pod}}"),
            (f"max by (pod) ({sel('sediment_extract_lag_sessions')})", "sessions {{pod}}"),
        ],
    )
    d.panel(
        "timeseries", "Commit-to-index delay",
        "Seconds from a turn's commit to its indexing.",
        [(quantile(0.5, "sediment_index_delay_seconds"), "p50"), (quantile(0.99, "sediment_index_delay_seconds"), "p99")],
        unit="s",
    )
    d.panel(
        "timeseries", "Deliveries by worker and outcome",
        "ack: done; retry: failed, redelivered after a backoff (parked after the attempt cap); reject: parked at once.",
        [(rate("sediment_events_consumed_total", by="worker, outcome"), "{{worker}} {{outcome}}")],
        unit="ops", stack=True,
    )
    d.panel(
        "timeseries", "Events published",
        "Wake-up events published by the API, by routing key and result; an error means the sweep has to find the turn.",
        [(rate("sediment_events_published_total", by="routing_key, result"), "{{routing_key}} {{result}}")],
        unit="ops",
    )
    d.panel(
        "timeseries", "Turns indexed, recovered by sweeps, handler panics",
        "Turns written to the search index; those found by a backlog sweep instead of an event (a lost or late event); handler runs that panicked.",
        [
            (rate("sediment_turns_indexed_total"), "turns indexed"),
            (rate("sediment_sweep_recovered_turns_total"), "turns recovered by sweeps"),
            (rate("sediment_handler_panics_total", by="worker"), "panics {{worker}}"),
        ],
        unit="ops",
    )

    d.row("Index writes")
    d.panel(
        "timeseries", "Index update and flush time",
        "Qdrant Edge: applying one write to the segments (sediment_index_update_seconds), and making the writes since the last flush durable (sediment_index_flush_seconds: its WAL and every segment, fsynced), p50 and p99. A slow disk shows here first.",
        [
            (quantile(0.5, "sediment_index_update_seconds"), "update p50"),
            (quantile(0.99, "sediment_index_update_seconds"), "update p99"),
            (quantile(0.5, "sediment_index_flush_seconds"), "flush p50"),
            (quantile(0.99, "sediment_index_flush_seconds"), "flush p99"),
        ],
        unit="s",
    )
    d.panel(
        "timeseries", "Batching of index writes",
        "Median points per index write after concurrent upserts are combined (sediment_index_write_points), sessions per index round batch (sediment_index_round_sessions) and sessions whose cursors one sync advanced (sediment_index_sync_sessions). They grow with load: that is how the worker keeps up.",
        [
            (quantile(0.5, "sediment_index_write_points"), "points per write"),
            (quantile(0.5, "sediment_index_round_sessions"), "sessions per round"),
            (quantile(0.5, "sediment_index_sync_sessions"), "sessions per sync"),
        ],
    )
    d.panel(
        "timeseries", "Index optimizer",
        "Qdrant Edge's optimizer: 1 while a run is in progress (under sustained ingest one run can last as long as the ingest), segments as read at each flush, and runs finished by result.",
        [
            (f"max by (pod) ({sel('sediment_index_optimizing')})", "optimizing {{pod}}"),
            (f"max by (pod) ({sel('sediment_index_segments')})", "segments {{pod}}"),
            (rate("sediment_index_optimizer_runs_total", by="result"), "runs/s {{result}}"),
        ],
    )
    d.panel(
        "timeseries", "Wake-ups",
        "Sessions one turns.appended wake-up carried (sediment_wakeup_sessions, p50 and p99), and appends merged into a wake-up already waiting (sediment_events_coalesced_total).",
        [
            (quantile(0.5, "sediment_wakeup_sessions"), "sessions per wake-up p50"),
            (quantile(0.99, "sediment_wakeup_sessions"), "sessions per wake-up p99"),
            (rate("sediment_events_coalesced_total"), "coalesced/s"),
        ],
    )
    d.panel(
        "timeseries", "Embedded store commits",
        "Embedded deployment only: appends committed together in one SQLite transaction and fsync (sediment_store_group_commit_appends, p50 and p99). More per commit means a slower disk, whose fsync the waiting appends share.",
        [
            (quantile(0.5, "sediment_store_group_commit_appends"), "appends per commit p50"),
            (quantile(0.99, "sediment_store_group_commit_appends"), "appends per commit p99"),
        ],
    )
    d.panel(
        "timeseries", "Embedded store checkpoint time",
        "Embedded deployment only: the SQLite WAL checkpoint that a thread of its own runs every second, off the append path (sediment_store_checkpoint_seconds).",
        [
            (quantile(0.5, "sediment_store_checkpoint_seconds"), "p50"),
            (quantile(0.99, "sediment_store_checkpoint_seconds"), "p99"),
        ],
        unit="s",
    )

    d.row("Ingest")
    d.panel(
        "timeseries", "Turns ingested",
        "New turns stored by the API (idempotent replays not counted).",
        [(rate("sediment_turns_ingested_total"), "turns/s")],
        unit="ops",
    )
    d.panel(
        "timeseries", "Requests by route and status",
        "HTTP requests served by the API.",
        [(rate("sediment_http_requests_total", by="route, status"), "{{route}} {{status}}")],
        unit="reqps", stack=True,
    )
    d.panel(
        "timeseries", "Request latency p99 by route",
        "Ingest is POST /v1/sessions/{session_id}/messages.",
        [(quantile(0.99, "sediment_http_request_duration_seconds", by="route"), "{{route}}")],
        unit="s",
    )

    d.row("Recall")
    d.panel(
        "timeseries", "Recalls by strategy and result",
        "result is ok or the first error code of the recall.",
        [(rate("sediment_recalls_total", by="strategy, result"), "{{strategy}} {{result}}")],
        unit="ops", stack=True,
    )
    d.panel(
        "timeseries", "Recall latency",
        "Whole recall, including the query embedding; bounded by the recall timeout (5 s by default).",
        [(quantile(q, "sediment_recall_duration_seconds"), f"p{int(q * 100)}") for q in (0.5, 0.95, 0.99)],
        unit="s",
    )
    d.panel(
        "timeseries", "Recall errors by code",
        "Structured error codes: recall_timeout, index_unavailable, embedding_unavailable, store_unavailable.",
        [(rate("sediment_recall_errors_total", by="code"), "{{code}}")],
        unit="ops", stack=True,
    )
    d.panel(
        "timeseries", "Recall error ratio",
        "Share of recalls that reported an error code (the alert threshold is metrics.prometheusRule.recallErrorRatio).",
        [(rate("sediment_recalls_total", 'result!="ok"') + " / " + rate("sediment_recalls_total"), "errors / recalls")],
        unit="percentunit",
    )
    d.panel(
        "timeseries", "Items per recall",
        "Dynamic items returned by a recall.",
        [(quantile(0.5, "sediment_recall_items"), "p50"), (quantile(0.95, "sediment_recall_items"), "p95")],
    )
    d.panel(
        "timeseries", "Conversation searches",
        "POST /v1/conversations/search by strategy and result.",
        [(rate("sediment_conversation_searches_total", by="strategy, result"), "{{strategy}} {{result}}")],
        unit="ops",
    )

    d.row("L1 extraction funnel")
    d.panel(
        "timeseries", "Funnel: turns in, junk out, cards extracted",
        "Turns read by extraction batches, turns dropped by the junk filter, and the cards extracted from the rest.",
        [
            (rate("sediment_extract_input_turns_total"), "input turns"),
            (rate("sediment_extract_junk_turns_total"), "junk turns"),
            (rate("sediment_extract_cards_total"), "cards"),
        ],
        unit="ops", w=12,
    )
    d.panel(
        "timeseries", "Extraction rate and junk share",
        "Cards per input turn (low: the prompt is too conservative or the turns are noisy) and the share of turns the junk filter dropped.",
        [
            (f"{rate('sediment_extract_cards_total')} / {rate('sediment_extract_input_turns_total')}", "cards per turn"),
            (f"{rate('sediment_extract_junk_turns_total')} / {rate('sediment_extract_input_turns_total')}", "junk share"),
        ],
        unit="percentunit", w=12,
    )
    d.panel(
        "piechart", "Decision mix",
        "Conflict decisions over the dashboard's time range: add (new), update, merge, discard (redundant). A discard share above 50 % for a week says dedup or the prompt needs tuning.",
        [("sum by (decision) (increase(" + sel("sediment_extract_decisions_total") + "[$__range]))", "{{decision}}")],
        w=6, instant=True,
    )
    d.panel(
        "timeseries", "Decisions over time",
        "Conflict decisions per second by kind.",
        [(rate("sediment_extract_decisions_total", by="decision"), "{{decision}}")],
        unit="ops", stack=True, w=6,
    )
    d.panel(
        "timeseries", "Batches by result, failures by kind",
        "Extraction batches (ok, empty: all junk, failed: retried, raced) and failures (unavailable, malformed, rejected); judge failures add every card of the batch.",
        [
            (rate("sediment_extract_batches_total", by="result"), "batch {{result}}"),
            (rate("sediment_extract_failures_total", by="kind"), "failure {{kind}}"),
            (rate("sediment_extract_judge_failures_total"), "judge failures"),
        ],
        unit="ops", w=6,
    )
    d.panel(
        "timeseries", "Stage duration p95",
        "Extraction stages: extract (the LLM or rules), dedup (candidates and judge), commit.",
        [(quantile(0.95, "sediment_extract_stage_duration_seconds", by="stage"), "{{stage}}")],
        unit="s", w=6,
    )
    d.panel(
        "timeseries", "Cards by engine, secrets redacted, memories indexed",
        "Cards by extraction engine (rules, llm), secrets masked before extraction, memory index operations applied.",
        [
            (rate("sediment_extract_cards_total", by="mode"), "cards {{mode}}"),
            (rate("sediment_extract_redactions_total"), "redactions"),
            (rate("sediment_memories_indexed_total", by="op"), "index {{op}}"),
        ],
        unit="ops", w=24, h=7,
    )

    d.row("LLM calls and spend")
    d.panel(
        "timeseries", "LLM calls by trace and result",
        "One per HTTP attempt: ok, retry, unavailable (after the last retry), rejected.",
        [(rate("sediment_llm_calls_total", by="trace, result"), "{{trace}} {{result}}")],
        unit="ops",
    )
    d.panel(
        "timeseries", "LLM latency p95 by trace",
        "Per attempt.",
        [(quantile(0.95, "sediment_llm_call_duration_seconds", by="trace"), "{{trace}}")],
        unit="s",
    )
    d.panel(
        "timeseries", "Malformed answers and repairs",
        "Answers that failed validation, and the repair calls made for them by result.",
        [
            (rate("sediment_llm_malformed_outputs_total", by="trace"), "malformed {{trace}}"),
            (rate("sediment_llm_repairs_total", by="trace, result"), "repair {{trace}} {{result}}"),
        ],
        unit="ops",
    )
    d.panel(
        "timeseries", "Tokens by trace and kind",
        "Prompt and completion tokens per second, as the provider's usage reports them.",
        [(rate("sediment_llm_tokens_total", by="trace, kind"), "{{trace}} {{kind}}")],
        unit="short", stack=True, w=12,
    )
    prompt = sel("sediment_llm_tokens_total", 'kind="prompt"')
    completion = sel("sediment_llm_tokens_total", 'kind="completion"')
    spend = (
        f"(sum (increase({prompt}[$__range])) * $prompt_usd_per_mtok"
        f" + sum (increase({completion}[$__range])) * $completion_usd_per_mtok) / 1e6"
    )
    d.panel(
        "stat", "Estimated LLM spend over the time range",
        "Tokens times the prices in the dashboard's variables (USD per million prompt and completion tokens).",
        [(spend, "USD")],
        unit="currencyUSD", w=6, instant=True,
    )
    d.panel(
        "stat", "Tokens over the time range",
        "Prompt and completion tokens.",
        [("sum by (kind) (increase(" + sel("sediment_llm_tokens_total") + "[$__range]))", "{{kind}}")],
        w=6, instant=True,
    )

    d.row("Session context and L3 compaction")
    d.panel(
        "timeseries", "Compactions by result",
        "Session compactions (L3): queued, then success, failed or lease_lost (another worker took the job over).",
        [(rate("sediment_compactions_total", by="result"), "{{result}}")],
        unit="ops",
    )
    d.panel(
        "timeseries", "L3 failure ratio",
        "Failed / finished (success + failed) compactions; seed 000 wants it under 10 % (metrics.prometheusRule.l3FailureRatio).",
        [(rate("sediment_compactions_total", 'result="failed"') + " / " + rate("sediment_compactions_total", 'result=~"success|failed"'), "failed / finished")],
        unit="percentunit",
    )
    d.panel(
        "timeseries", "Context answers: truncations and summary reuse",
        "Turns cut by L1 truncation (head + tail), and context answers in which a stored summary stood in for older turns (L2).",
        [
            (rate("sediment_context_truncations_total"), "turns truncated"),
            (rate("sediment_context_summary_reuse_total"), "summary reused"),
        ],
        unit="ops",
    )

    d.row("Embeddings")
    d.panel(
        "timeseries", "Embedding requests by result",
        "One per HTTP attempt: ok, retry, error.",
        [(rate("sediment_embedding_requests_total", by="provider, result"), "{{provider}} {{result}}")],
        unit="ops",
    )
    d.panel(
        "timeseries", "Embedding latency p95",
        "Per attempt.",
        [(quantile(0.95, "sediment_embedding_duration_seconds", by="provider"), "{{provider}}")],
        unit="s",
    )
    d.panel(
        "timeseries", "Indexed without a dense vector",
        "Turns and memories indexed for keyword search only because the embedder refused them.",
        [(rate("sediment_embedding_skipped_turns_total"), "skipped")],
        unit="ops",
    )

    d.row("L2 scenes and L3 persona")
    d.panel(
        "timeseries", "Scene runs by result",
        "L2 scene runs: edited (changes committed), nothing (nothing to change), busy (another worker holds the owner), rolled_back (changes refused, the folder restored from its snapshot), failed (retried after layers.scene.retryMs), lease_lost (the run outlived its lease).",
        [(rate("sediment_scene_runs_total", by="result"), "{{result}}")],
        unit="ops", stack=True,
    )
    d.panel(
        "timeseries", "Scene run latency",
        "Scene generation latency, claim to commit, over every result.",
        [(quantile(q, "sediment_scene_run_seconds"), f"p{int(q * 100)}") for q in (0.5, 0.99)],
        unit="s",
    )
    d.panel(
        "timeseries", "Scene edits by op, rollbacks",
        "Scene changes committed (create, update, merge, delete), and runs rolled back to their snapshot (refused changes, failures mid-edit, runs that died mid-edit).",
        [
            (rate("sediment_scene_edits_total", by="op"), "{{op}}"),
            (rate("sediment_scene_rollbacks_total"), "rollbacks"),
        ],
        unit="ops",
    )
    d.panel(
        "timeseries", "Persona builds by trigger and result",
        "L3 persona builds: built, skipped, lease_lost or failed, by what triggered them (signal, cold_start, self_heal, first_scene, threshold).",
        [(rate("sediment_persona_builds_total", by="trigger, result"), "{{trigger}} {{result}}")],
        unit="ops", stack=True,
    )
    d.panel(
        "timeseries", "Persona build latency",
        "Persona generation latency.",
        [(quantile(q, "sediment_persona_build_seconds"), f"p{int(q * 100)}") for q in (0.5, 0.99)],
        unit="s",
    )
    d.panel(
        "timeseries", "File-store writes per scene run",
        "Objects written by a committed scene run.",
        [(quantile(0.5, "sediment_scene_run_writes"), "p50"), (quantile(0.95, "sediment_scene_run_writes"), "p95")],
    )
    d.panel(
        "timeseries", "Scene and persona failure ratios",
        "Failed and rolled-back scene runs over runs that were not busy, and failed persona builds over builds that were not skipped (the alert thresholds are metrics.prometheusRule.sceneFailureRatio, sceneRollbackRatio and personaFailureRatio, over an hour).",
        [
            (rate("sediment_scene_runs_total", 'result="failed"') + " / " + rate("sediment_scene_runs_total", 'result!="busy"'), "scene failed"),
            (rate("sediment_scene_runs_total", 'result="rolled_back"') + " / " + rate("sediment_scene_runs_total", 'result!="busy"'), "scene rolled back"),
            (rate("sediment_persona_builds_total", 'result="failed"') + " / " + rate("sediment_persona_builds_total", 'result!="skipped"'), "persona failed"),
        ],
        unit="percentunit", w=24, h=7,
    )

    return {
        "title": "sediment",
        "uid": "sediment-overview",
        "description": "sediment: queues and lag, ingest and recall, the L1 extraction funnel and decision mix, error codes, LLM calls and spend, L3 compaction, L2 scenes and the L3 persona. Shipped with the Helm chart; generated by helm/ci/dashboard.py.",
        "tags": ["sediment"],
        "timezone": "",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus", "current": {}, "hide": 0},
                {
                    "name": "namespace",
                    "label": "Namespace",
                    "type": "query",
                    "datasource": DS,
                    "query": {"query": "label_values(sediment_http_requests_total, namespace)", "refId": "namespace"},
                    "definition": "label_values(sediment_http_requests_total, namespace)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                    "hide": 0,
                },
                {
                    "name": "prompt_usd_per_mtok",
                    "label": "USD per 1M prompt tokens",
                    "type": "textbox",
                    "query": "0.15",
                    "current": {"text": "0.15", "value": "0.15"},
                    "hide": 0,
                },
                {
                    "name": "completion_usd_per_mtok",
                    "label": "USD per 1M completion tokens",
                    "type": "textbox",
                    "query": "0.60",
                    "current": {"text": "0.60", "value": "0.60"},
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
        "panels": d.panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run helm/ci/dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
