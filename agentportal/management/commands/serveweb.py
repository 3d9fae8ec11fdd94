"""The portal's threaded WSGI server: Django's own, without autoreload, with a deeper backlog."""

import contextlib
import signal
import sys

from django.core.management.base import BaseCommand
from django.core.servers.basehttp import WSGIServer, get_internal_wsgi_application, run
from django.db import connections


class PortalWSGIServer(WSGIServer):
    # Django's development server queues 10 connections; a burst of concurrent clients
    # (32 supervisors deciding at once) would be reset.
    request_queue_size = 256


class Command(BaseCommand):
    help = "Serve the site with a threaded WSGI server (used by runportal)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host, port, **options):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
        # Every request gets a new thread here, so a connection kept for reuse would be kept
        # by a thread that is gone: close each one when its request ends.
        for alias in connections:
            connections.settings[alias]["CONN_MAX_AGE"] = 0
        with contextlib.suppress(KeyboardInterrupt):
            run(
                host,
                port,
                get_internal_wsgi_application(),
                threading=True,
                server_cls=PortalWSGIServer,
            )
