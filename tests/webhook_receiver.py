#!/usr/bin/env python3
"""A webhook receiver for the webhook sink's tests.

Listens on 127.0.0.1 (``--port``, 0 for a free one; prints ``listening PORT`` on stdout
once it accepts connections), takes POSTs of JSON alerts and appends one JSON line per
request to ``--log``: the time it arrived, its ``alert_id``, the ``Idempotency-Key`` and
``Content-Type`` headers and the alert's ``message``. Answers ``--status`` (200), except the
first ``--fail-first N`` requests, which get 503. Stops on SIGTERM or SIGKILL; the log is
flushed after every line, so what it answered 2xx to is in the log.
"""

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--fail-first", type=int, default=0)
    args = parser.parse_args()
    log = open(args.log, "a", encoding="utf-8")
    seen = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            seen["n"] += 1
            status = 503 if seen["n"] <= args.fail_first else args.status
            try:
                alert = json.loads(body)
            except ValueError:
                alert = {}
            if 200 <= status < 300:
                # Logged before answering: a request that was answered 2xx is in the log.
                log.write(json.dumps({
                    "t": time.time(),
                    "alert_id": alert.get("alert_id"),
                    "key": self.headers.get("Idempotency-Key"),
                    "content_type": self.headers.get("Content-Type"),
                    "kind": alert.get("kind"),
                    "schema": alert.get("schema"),
                    "message": alert.get("message"),
                }) + "\n")
                log.flush()
            answer = b'{"ok": true}\n' if status < 300 else b'{"ok": false}\n'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_):
            pass

    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
