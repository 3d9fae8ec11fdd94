"""The portal's forms for a supervisor's decision: the decision itself, and the call's
arguments as a field each, built from the tool's argument model."""

import json
from typing import Any

from django import forms
from pydantic import BaseModel


class DecisionForm(forms.Form):
    action = forms.ChoiceField(
        choices=[
            ("approve", "approve"),
            ("preview", "preview"),
            ("revise", "revise"),
            ("reject", "reject"),
        ]
    )
    # Text, parsed in clean(): a JSON error is then said where it is, and the text kept.
    tool_args = forms.CharField(required=False)
    reason = forms.CharField(required=False, max_length=2000, strip=True)

    def clean(self):
        cleaned = super().clean()
        text = (cleaned.get("tool_args") or "").strip()
        cleaned["tool_args"] = None
        if cleaned.get("action") in ("preview", "revise") and text:
            try:
                cleaned["tool_args"] = json.loads(text)
            except json.JSONDecodeError as error:
                self.add_error(
                    "tool_args",
                    f"This is not valid JSON: {error.msg.lower()} at line {error.lineno}, "
                    f"column {error.colno}.",
                )
        return cleaned


class ArgumentsForm(forms.Form):
    """A field per argument of a tool (its pydantic model): the supervisor edits values, not
    JSON. Lists and objects are edited as JSON in their own field."""

    prefix = "arg"

    def __init__(self, args_model: type[BaseModel], proposed: dict[str, Any], *args, **kwargs):
        super().__init__(*args, **kwargs)
        schema = args_model.model_json_schema()
        self.structured: set[str] = set()
        for name, spec in schema.get("properties", {}).items():
            structured = spec.get("type") in ("array", "object") or "$ref" in spec
            if structured:
                self.structured.add(name)
            value = proposed.get(name)
            self.fields[name] = forms.CharField(
                label=spec.get("title", name.replace("_", " ").capitalize()),
                help_text=spec.get("description", ""),
                required=False,
                strip=True,
                initial="" if value is None else json.dumps(value) if structured else str(value),
                widget=forms.Textarea(attrs={"rows": 3}) if structured else forms.TextInput(),
            )

    @staticmethod
    def submitted(data) -> bool:
        """Whether a POST came from this form (rather than the JSON editor)."""
        return any(key.startswith(f"{ArgumentsForm.prefix}-") for key in data)

    def arguments(self) -> dict[str, Any] | None:
        """The values as the tool's arguments (left empty: left out), or None after adding
        an error to a field whose JSON does not parse. Call after is_valid()."""
        arguments: dict[str, Any] = {}
        for name, text in self.cleaned_data.items():
            if text == "":
                continue
            if name in self.structured:
                try:
                    arguments[name] = json.loads(text)
                except json.JSONDecodeError as error:
                    self.add_error(name, f"This is not valid JSON: {error.msg.lower()}.")
                    continue
            else:
                arguments[name] = text
        return None if self.errors else arguments
