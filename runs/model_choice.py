"""Which model client a release's manifest names: the offline scripted model playing one of the
registered scripts, or an OpenAI-compatible endpoint."""

from typing import Any

from django.conf import settings

from runs.extensions import DEFAULT_SCRIPT
from runs.llm import ModelClient, OpenAIChatModel
from runs.scripted import ScriptedModel


def model_client_for(manifest: dict[str, Any]) -> ModelClient:
    name = manifest.get("model", "default")
    if name == "default":
        name = settings.AGENTPORTAL["MODEL"]
    if name == "openai":
        config = settings.AGENTPORTAL
        return OpenAIChatModel(
            base_url=config["OPENAI_BASE_URL"],
            api_key=config["OPENAI_API_KEY"],
            model=config["OPENAI_MODEL"],
            timeout=config["OPENAI_TIMEOUT_SECONDS"],
        )
    _, _, script_name = name.partition("scripted:")
    return ScriptedModel(script_name or DEFAULT_SCRIPT)
