"""Fake Telegram Bot API + Slack incoming webhook + generic webhook + PagerDuty Events API v2 +
ntfy, on loopback only.

Answers with the documented shapes: Telegram `{"ok": true, "result": {...}}` /
`{"ok": false, "error_code", "description", "parameters": {"retry_after"}}`, Slack `ok` or an
error code as text with `Retry-After` on 429; PagerDuty `POST /v2/enqueue` -> 202
`{"status": "success", "dedup_key"}` or 400 `{"status": "invalid event", "errors": [...]}`, with
the incidents it holds by dedup_key (`api.incidents`: "triggered" / "resolved"); ntfy JSON
publishing `POST /` (or `/ntfy/`) -> 200 or `{"code", "http", "error"}` (401 without the access
token when one is set, 413 over 4096 bytes of message). Scripted failures (`fail_next`) let a test
make a channel answer 429 / 400 / 5xx, or be down (`down`).

In a test:     with FakeApi(token="T") as api: ... api.received("telegram")
Standalone:    python -m tests.fakes.http_api --port 8999 --log /tmp/fake.jsonl [--token T]
  GET  /_fake/received          -> JSON list of the messages received
  POST /_fake/script            {"service": "telegram", "status": 429, "times": 1, "retry_after": 3}
  POST /_fake/reset
Every received message is also appended to --log as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOOPBACK = "127.0.0.1"


class FakeApi:
    def __init__(self, port: int = 0, token: str | None = None, log_path: str | None = None,
                 pagerduty_key: str | None = None, ntfy_token: str | None = None):
        self.token = token
        self.pagerduty_key = pagerduty_key  # None: any routing key is accepted
        self.ntfy_token = ntfy_token  # None: no access token is needed
        self.incidents: dict[str, str] = {}  # PagerDuty dedup_key -> triggered | resolved
        self.log_path = log_path
        self.messages: list[dict] = []
        self.script: dict[str, list[dict]] = {}
        self.lock = threading.Lock()
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self.server = ThreadingHTTPServer((LOOPBACK, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://{LOOPBACK}:{self.port}"
        self.thread: threading.Thread | None = None

    # control ---------------------------------------------------------------------------------
    def fail_next(self, service: str, status: int, times: int = 1,
                  retry_after: int | None = None, description: str | None = None) -> None:
        with self.lock:
            self.script.setdefault(service, []).extend(
                [{"status": status, "retry_after": retry_after, "description": description}]
                * times)

    def received(self, service: str | None = None) -> list[dict]:
        with self.lock:
            return [m for m in self.messages if service in (None, m["service"])]

    def reset(self) -> None:
        with self.lock:
            self.messages.clear()
            self.script.clear()
            self.incidents.clear()

    def start(self) -> FakeApi:
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeApi:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _take_script(self, service: str) -> dict | None:
        with self.lock:
            queue = self.script.get(service) or []
            return queue.pop(0) if queue else None

    def _record(self, entry: dict) -> None:
        with self.lock:
            self.messages.append(entry)
            if self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApi

    def log_message(self, *args) -> None:  # keep test output (and tokens in paths) quiet
        pass

    def _answer(self, status: int, body: str, ctype: str = "application/json", headers=()):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/_fake/received":
            return self._answer(200, json.dumps(self.fake.received()))
        self._answer(404, "not found", "text/plain")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        if self.path == "/_fake/script":
            d = json.loads(raw)
            self.fake.fail_next(d["service"], int(d["status"]), int(d.get("times", 1)),
                                d.get("retry_after"), d.get("description"))
            return self._answer(200, "{}")
        if self.path == "/_fake/reset":
            self.fake.reset()
            return self._answer(200, "{}")
        if self.path.startswith("/bot") and self.path.endswith("/sendMessage"):
            return self._telegram(raw)
        if self.path.startswith("/services/"):
            return self._slack(raw)
        if self.path.startswith("/hook/"):
            return self._webhook(raw)
        if self.path == "/v2/enqueue":
            return self._pagerduty(raw)
        if self.path in ("/", "/ntfy/"):
            return self._ntfy(raw)
        self._answer(404, "not found", "text/plain")

    def _forced(self, service: str, body) -> bool:
        """Answer a scripted failure (429 with Retry-After); True when one was answered."""
        forced = self.fake._take_script(service)
        if not forced:
            return False
        headers = [("Retry-After", str(forced["retry_after"]))] \
            if forced["status"] == 429 and forced["retry_after"] is not None else []
        self._answer(forced["status"], json.dumps(body(forced)), headers=headers)
        return True

    def _pagerduty(self, raw: str) -> None:
        def invalid(*errors: str):
            self._answer(400, json.dumps({"status": "invalid event",
                                          "message": "Event object is invalid",
                                          "errors": list(errors)}))

        try:
            d = json.loads(raw)
        except ValueError:
            return invalid("Malformed JSON")
        key = d.get("routing_key")
        if not key or (self.fake.pagerduty_key is not None and key != self.fake.pagerduty_key):
            return invalid("'routing_key' is invalid")
        action, dedup = d.get("event_action"), d.get("dedup_key")
        if action not in ("trigger", "acknowledge", "resolve"):
            return invalid("'event_action' is invalid")
        if action != "trigger" and not dedup:
            return invalid("'dedup_key' is required for acknowledge and resolve")
        payload = d.get("payload") or {}
        if action == "trigger":
            summary = payload.get("summary") or ""
            if not 1 <= len(summary) <= 1024:
                return invalid("'payload.summary' is missing or longer than 1024")
            if not payload.get("source"):
                return invalid("'payload.source' is missing")
            if payload.get("severity") not in ("critical", "error", "warning", "info"):
                return invalid("'payload.severity' is invalid")
        if self._forced("pagerduty", lambda f: {"status": "throttled" if f["status"] == 429
                                                else "error", "message": f["description"]
                                                or f"Error {f['status']}"}):
            return
        dedup = dedup or f"fake-{len(self.fake.incidents)}"
        with self.fake.lock:
            self.fake.incidents[dedup] = {"trigger": "triggered", "resolve": "resolved"}.get(
                action, self.fake.incidents.get(dedup, "triggered"))
        self.fake._record({"service": "pagerduty", "action": action, "dedup_key": dedup,
                           "severity": payload.get("severity"), "event": d,
                           "text": payload.get("summary", "")})
        self._answer(202, json.dumps({"status": "success", "message": "Event processed",
                                      "dedup_key": dedup}))

    def _ntfy(self, raw: str) -> None:
        def error(status: int, code: int, text: str):
            self._answer(status, json.dumps({"code": code, "http": status, "error": text}))

        if self.fake.ntfy_token is not None and \
                self.headers.get("Authorization") != f"Bearer {self.fake.ntfy_token}":
            return error(401, 40101, "unauthorized")
        try:
            d = json.loads(raw)
        except ValueError:
            return error(400, 40024, "invalid request: malformed JSON")
        message = d.get("message") or ""
        if not d.get("topic"):
            return error(400, 40009, "invalid topic")
        if len(message.encode("utf-8")) > 4096:
            return error(413, 41301, "message too large")
        if d.get("priority") not in (None, 1, 2, 3, 4, 5):
            return error(400, 40007, "invalid priority")
        if self._forced("ntfy", lambda f: {"code": f["status"] * 100 + 1, "http": f["status"],
                                           "error": f["description"] or "limit reached"}):
            return
        self.fake._record({"service": "ntfy", "path": self.path, "topic": d["topic"],
                           "title": d.get("title"), "priority": d.get("priority"),
                           "tags": d.get("tags"), "text": message})
        self._answer(200, json.dumps({"id": "fake", "event": "message", "topic": d["topic"],
                                      "message": message}))

    def _telegram(self, raw: str) -> None:
        def error(code: int, description: str, retry_after=None):
            body = {"ok": False, "error_code": code, "description": description}
            if retry_after is not None:
                body["parameters"] = {"retry_after": retry_after}
            self._answer(code, json.dumps(body))

        token = self.path[len("/bot"):-len("/sendMessage")]
        if self.fake.token is not None and token != self.fake.token:
            return error(401, "Unauthorized")
        try:
            d = json.loads(raw)
        except ValueError:
            return error(400, "Bad Request: can't parse JSON")
        text = d.get("text") or ""
        if not d.get("chat_id"):
            return error(400, "Bad Request: chat_id is empty")
        if not 1 <= len(text.encode("utf-16-le")) // 2 <= 4096:
            return error(400, "Bad Request: message text is empty or too long")
        forced = self.fake._take_script("telegram")
        if forced:
            status = forced["status"]
            if status == 429:
                r = forced["retry_after"] or 1
                return error(429, forced["description"] or f"Too Many Requests: retry after {r}", r)
            return error(status, forced["description"] or f"Error {status}")
        self.fake._record({"service": "telegram", "chat_id": d["chat_id"], "text": text})
        n = len(self.fake.received("telegram"))
        self._answer(200, json.dumps({"ok": True, "result": {
            "message_id": n, "chat": {"id": d["chat_id"]}, "text": text}}))

    def _slack(self, raw: str) -> None:
        try:
            d = json.loads(raw)
        except ValueError:
            return self._answer(400, "invalid_payload", "text/plain")
        if not isinstance(d, dict) or "text" not in d:
            return self._answer(400, "no_text", "text/plain")
        forced = self.fake._take_script("slack")
        if forced:
            status = forced["status"]
            headers = [("Retry-After", str(forced["retry_after"] or 1))] if status == 429 else []
            code = forced["description"] or {429: "rate_limited", 400: "invalid_payload",
                                              404: "no_service"}.get(status, "internal_error")
            return self._answer(status, code, "text/plain", headers)
        self.fake._record({"service": "slack", "path": self.path, "text": d["text"]})
        self._answer(200, "ok", "text/plain")

    def _webhook(self, raw: str) -> None:
        forced = self.fake._take_script("webhook")
        if forced:
            headers = [("Retry-After", str(forced["retry_after"] or 1))] \
                if forced["status"] == 429 else []
            return self._answer(forced["status"], "error", "text/plain", headers)
        try:
            d = json.loads(raw)
        except ValueError:
            return self._answer(400, "bad json", "text/plain")
        self.fake._record({"service": "webhook", "path": self.path, "payload": d,
                           "text": d.get("message", "")})
        self._answer(200, "{}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", help="append each received message as a JSON line")
    p.add_argument("--token", help="accept only this Telegram bot token (401 otherwise)")
    p.add_argument("--port-file", help="write the bound port here once listening")
    args = p.parse_args(argv)
    fake = FakeApi(args.port, token=args.token, log_path=args.log)
    if args.port_file:
        with open(args.port_file, "w") as f:
            f.write(f"{fake.port}\n")
    print(f"fake Telegram/Slack/webhook/PagerDuty/ntfy API listening on {fake.base}", flush=True)
    try:
        fake.server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
