"""A webhook receiver on loopback, for the tests of what the shop's webhooks send."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = "s3cret"


class Receiver:
    """A local webhook endpoint that answers with the statuses it is given, then 204."""

    def __init__(self, statuses=()):
        self.statuses = list(statuses)
        self.requests: list[tuple] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((self.headers, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 204
                self.send_response(status)
                if status in (301, 302):
                    self.send_header("Location", "http://10.0.0.1/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
