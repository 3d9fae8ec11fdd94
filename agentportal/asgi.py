"""The portal's ASGI application, which the web server (gunicorn with uvicorn's workers, see
agentportal.gunicorn_conf) serves."""

import os
import warnings

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentportal.settings")
# Read by the settings: requests run in threads of their own, so connections come from a pool.
os.environ["AGENTPORTAL_WEB_PROCESS"] = "1"

# WhiteNoise answers static files with a file iterator, which Django reads whole before sending
# it under ASGI: the files are small and cached by browsers, so the warning each time is noise.
warnings.filterwarnings(
    "ignore", message="StreamingHttpResponse must consume synchronous iterators", category=Warning
)

application = get_asgi_application()
