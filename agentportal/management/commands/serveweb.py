"""The portal's WSGI server: Django's own, without autoreload, answering from a fixed pool of
threads with a deep listen backlog."""

import contextlib
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

from django.core.management.base import BaseCommand
from django.core.servers.basehttp import WSGIServer, get_internal_wsgi_application, run

POOL_THREADS = 48


class PooledWSGIServer(WSGIServer):
    # Django's development server queues 10 connections; a burst of concurrent clients
    # (32 supervisors deciding at once) would be reset.
    request_queue_size = 256

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A fixed pool, not a thread per request: each thread keeps its database connection
        # (CONN_MAX_AGE) instead of opening one per request, and the connections are bounded.
        self.pool = ThreadPoolExecutor(max_workers=POOL_THREADS, thread_name_prefix="web")

    def process_request(self, request, client_address):
        self.pool.submit(self._serve, request, client_address)

    def _serve(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)


class Command(BaseCommand):
    help = "Serve the site with a pooled, threaded WSGI server (used by runportal)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host, port, **options):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
        with contextlib.suppress(KeyboardInterrupt):
            run(host, port, get_internal_wsgi_application(), server_cls=PooledWSGIServer)
