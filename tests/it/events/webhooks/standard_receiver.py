"""A webhook receiver for the tests: verifies every POST with the official Standard
Webhooks package (standardwebhooks, pinned in scripts/test.sh), answers 204 when the
signature holds and 400 when it does not, and prints one line per request:
`verified <webhook-id> <event id>` or `refused <why>`.

Listens on 127.0.0.1 on a free port, printed first as `listening <port>`. The secret is
read from the first line of stdin, never from the command line (which `ps` shows).
"""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

WEBHOOK = Webhook(sys.stdin.readline().strip())


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        try:
            event = WEBHOOK.verify(body, dict(self.headers.items()))
            line = f"verified {self.headers.get('webhook-id')} {event['id']}"
            status = 204
        except Exception as e:  # every failure is a refusal the test reports
            line = f"refused {type(e).__name__}: {e}"
            status = 400
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()
        print(line, flush=True)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
