#!/usr/bin/env python3
"""The application behind nginx in tests/live.rs: a tiny HTTP/1.1 server (http.server) that
answers every GET with a short text body. Usage: app.py ADDRESS PORT. Exits on SIGTERM."""

import http.server
import signal
import sys

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"hello from the app\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
