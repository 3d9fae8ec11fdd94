"""The web server's settings: gunicorn supervising uvicorn's ASGI workers. Each worker process
serves many requests and event streams at once on its event loop (a stream waits there without
a thread), and gunicorn replaces a worker process that dies.

`manage.py runportal --role web` starts it with these settings; to run it by hand:
`gunicorn -c python:agentportal.gunicorn_conf --bind 10.0.0.11:8000 --workers 4`.
"""

from agentportal.conf import trusted_proxies

wsgi_app = "agentportal.asgi:application"
worker_class = "uvicorn_worker.UvicornWorker"
bind = ["127.0.0.1:8000"]
workers = 2
# A burst of clients connecting at once waits in the kernel's queue rather than being reset.
backlog = 2048
# A worker that stops answering its supervisor for this long is replaced.
timeout = 30
# On a stop, requests in progress get this long to finish (event streams end by themselves
# within 30 s and clients reconnect).
graceful_timeout = 10
keepalive = 5
# Only these peers' X-Forwarded-For (and -Proto) are believed; uvicorn would otherwise take them
# from any client on loopback (gunicorn's default), and with nothing set here it takes none.
forwarded_allow_ips = ",".join(trusted_proxies())
# The portal does not use gunicorn's control interface, whose socket would be one path for all
# the servers on a machine.
control_socket_disable = True
# The proxy in front (or the demo's console) logs requests; errors still go to stderr.
accesslog = None
errorlog = "-"
