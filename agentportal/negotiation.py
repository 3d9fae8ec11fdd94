from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation


class JSONFallbackNegotiation(DefaultContentNegotiation):
    """Answer in JSON when the client accepts nothing we render (a browser's text/html):
    API errors must reach every client as problem+json, never as a 406."""

    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except NotAcceptable:
            return renderers[0], renderers[0].media_type
