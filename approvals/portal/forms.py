"""The portal's forms for a supervisor's decision: the decision itself, the call's arguments
as a field each, built from the tool's argument model, and a plan's revision picked from the
shop's stock."""

import json
from typing import Any

from django import forms
from pydantic import BaseModel

from approvals.plans.selectors import ProductChoice


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
    # The digest of the arguments the page showed: an approval counts for those only.
    args_digest = forms.CharField(required=False, max_length=64)

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

    def __init__(
        self,
        args_model: type[BaseModel],
        proposed: dict[str, Any],
        *args,
        choices: dict[str, list[tuple[str, str]]] | None = None,
        **kwargs,
    ):
        """`choices`: the arguments picked from a list (an order of the customer's) rather
        than typed."""
        super().__init__(*args, **kwargs)
        schema = args_model.model_json_schema()
        self.structured: set[str] = set()
        for name, spec in schema.get("properties", {}).items():
            structured = spec.get("type") in ("array", "object") or "$ref" in spec
            if structured:
                self.structured.add(name)
            value = proposed.get(name)
            initial = "" if value is None else json.dumps(value) if structured else str(value)
            # What the page's script compares an edit with: an approve as proposed waits.
            attrs = {"data-on-the-table": initial}
            common = {
                # pydantic titles every field ("Order Id"); people read "Order id".
                "label": name.replace("_", " ").capitalize(),
                "help_text": spec.get("description", ""),
                "required": False,
                "initial": initial,
            }
            if choices and name in choices:
                self.fields[name] = forms.ChoiceField(
                    choices=choices[name], widget=forms.Select(attrs=attrs), **common
                )
            else:
                self.fields[name] = forms.CharField(
                    strip=True,
                    widget=forms.Textarea(attrs={"rows": 3, **attrs})
                    if structured
                    else forms.TextInput(attrs=attrs),
                    **common,
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


# --- revising a plan -----------------------------------------------------------------------------


class StockSelect(forms.Select):
    """A size picker whose out-of-stock sizes cannot be picked, unless already chosen: the
    page then shows the truth, and the form refuses it beside the field."""

    def __init__(self, out_of_stock: set[str], *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.out_of_stock = out_of_stock

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if value in self.out_of_stock and not selected:
            option["attrs"]["disabled"] = True
        return option


class PlanLineForm(forms.Form):
    """One line of a plan: which product of the order, for which size, how many."""

    product = forms.ChoiceField(label="Product bought")
    size = forms.ChoiceField(label="New size")
    quantity = forms.IntegerField(label="How many", min_value=1, max_value=20, initial=1)

    def __init__(self, *args, products: list[ProductChoice], **kwargs):
        super().__init__(*args, **kwargs)
        self.products = {product.sku: product for product in products}
        self.fields["product"].choices = [(p.sku, p.label) for p in products]
        self.fields["size"].widget = StockSelect(
            {size.sku for p in products for size in p.sizes if not size.in_stock}
        )
        # Grouped by product: one picker for every product of the order, no script needed.
        self.fields["size"].choices = [
            (p.name, [(size.sku, size.label) for size in p.sizes]) for p in products
        ]

    def clean(self):
        cleaned = super().clean()
        product = self.products.get(cleaned.get("product"))
        quantity = cleaned.get("quantity")
        if product is None or quantity is None or "size" not in cleaned:
            return cleaned
        size = product.size_for(cleaned["size"])
        if size is None:
            self.add_error("size", f"Pick a size of the {product.name}.")
        elif not size.in_stock:
            self.add_error("size", f"Size {size.size} is out of stock: pick another size.")
        elif size.in_stock < quantity:
            self.add_error("size", f"Only {size.in_stock} of size {size.size} in stock.")
        if quantity > product.quantity:
            self.add_error("quantity", f"The order holds only {product.quantity}.")
        return cleaned

    def item(self) -> dict[str, Any]:
        """The line as the plan's items name it. Call after is_valid()."""
        return {
            "sku": self.cleaned_data["product"],
            "new_sku": self.cleaned_data["size"],
            "quantity": self.cleaned_data["quantity"],
        }


class BasePlanLineFormSet(forms.BaseFormSet):
    def clean(self):
        if any(self.errors):
            return
        products = [form.cleaned_data["product"] for form in self.forms]
        if len(products) != len(set(products)):
            raise forms.ValidationError("Each product goes on one line only.")


# As many lines as a plan may hold (the tool's own limit), at least one.
PlanLineFormSet = forms.formset_factory(
    PlanLineForm,
    formset=BasePlanLineFormSet,
    extra=0,
    min_num=1,
    max_num=10,
    validate_min=True,
    validate_max=True,
)


class PlanRevisionForm(forms.Form):
    # The version the supervisor looked at: a colleague's newer one is never overwritten.
    proposal_version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    note = forms.CharField(
        label="Note for the customer (optional)",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
