"""Approver bands: how many people, and from which approver group, a call needs by its amount
("2 of Finance from 200.00, 1 of Support below"). A policy version holds its bands as JSON
(`[{"from": "200.00", "approvals": 2, "group": "Finance"}, ...]`); the band of a call is the
one with the highest `from` at or below its amount (`from` null: every amount). An amount
below every band needs one approval from any supervisor of the shop.

`two_approvers_from: X` is the shorthand of one band: two people, of any group, from X."""

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

# The most approvals a band may ask for.
MAX_APPROVALS = 20


@dataclass(frozen=True)
class ApproverBand:
    # Amounts from this one (inclusive) fall in the band; None: every amount.
    from_amount: Decimal | None
    approvals: int
    # The approver group whose members approve; None: any supervisor of the shop.
    group: str | None = None

    def as_json(self) -> dict[str, Any]:
        amount = None if self.from_amount is None else f"{self.from_amount:.2f}"
        return {"from": amount, "approvals": self.approvals, "group": self.group}

    def describe(self) -> str:
        """`2 of Finance from 200.00`, `1 from any amount`: the admin's line for the band."""
        who = f"{self.approvals} of {self.group}" if self.group else f"{self.approvals}"
        return f"{who} from {self.from_amount:.2f}" if self.from_amount is not None else who


def bands_from_json(raw: Iterable[dict[str, Any]] | None) -> tuple[ApproverBand, ...]:
    """A version's stored bands, lowest first. Stored bands were checked when written."""
    bands = (
        ApproverBand(
            from_amount=None if item.get("from") is None else Decimal(str(item["from"])),
            approvals=int(item["approvals"]),
            group=item.get("group") or None,
        )
        for item in raw or ()
    )
    return tuple(sorted(bands, key=_band_order))


def bands_as_json(bands: Iterable[ApproverBand]) -> list[dict[str, Any]]:
    return [band.as_json() for band in sorted(bands, key=_band_order)]


def _band_order(band: ApproverBand) -> tuple[bool, Decimal]:
    return (band.from_amount is not None, band.from_amount or Decimal(0))


def band_for(bands: tuple[ApproverBand, ...], amount: Decimal | None) -> ApproverBand | None:
    """The band of a call of `amount` (bands lowest first). An amount that cannot be read falls
    in the highest band: it is treated as the largest."""
    if not bands:
        return None
    if amount is None:
        return bands[-1]
    found = None
    for band in bands:
        if band.from_amount is None or band.from_amount <= amount:
            found = band
    return found


def bands_problems(
    bands: tuple[ApproverBand, ...], *, auto_approve_up_to: Decimal | None, groups: set[str]
) -> list[dict[str, str]]:
    """What is wrong with a policy's bands, as field errors of `approver_bands`: each asks for
    1 to MAX_APPROVALS people of a group the shop has, no two start at the same amount, and
    each that starts at an amount starts above the policy's auto-approval limit."""
    problems = []
    starts = [band.from_amount for band in bands]
    if len(set(starts)) != len(starts):
        problems.append({"field": "approver_bands", "message": "two bands start at one amount"})
    for band in bands:
        if not 1 <= band.approvals <= MAX_APPROVALS:
            problems.append(
                {"field": "approver_bands", "message": f"approvals from 1 to {MAX_APPROVALS}"}
            )
        if band.from_amount is not None and band.from_amount < 0:
            problems.append({"field": "approver_bands", "message": "from must not be negative"})
        if band.group is not None and band.group not in groups:
            known = ", ".join(sorted(groups)) or "none yet"
            problems.append(
                {
                    "field": "approver_bands",
                    "message": f"{band.group!r} is not an approver group of the shop ({known})",
                }
            )
        if (
            auto_approve_up_to is not None
            and band.from_amount is not None
            and band.from_amount <= auto_approve_up_to
        ):
            problems.append(
                {
                    "field": "approver_bands",
                    "message": f"each band's from must be above auto_approve_up_to "
                    f"({auto_approve_up_to})",
                }
            )
    return problems


# `2 of Finance from 200.00`, `1 of Support`, `2 from 500`: one band a line, in the admin.
_LINE = re.compile(
    r"^(?P<approvals>\d+)(?:\s+of\s+(?P<group>.+?))?(?:\s+from\s+(?P<amount>\S+))?$", re.I
)


def bands_parse(text: str) -> tuple[ApproverBand, ...]:
    """The admin's lines, one band each; ValueError naming the line that does not read."""
    bands = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        match = _LINE.match(line)
        try:
            if match is None:
                raise InvalidOperation
            amount = match["amount"]
            bands.append(
                ApproverBand(
                    from_amount=None
                    if amount is None
                    else Decimal(amount).quantize(Decimal("0.01")),
                    approvals=int(match["approvals"]),
                    group=match["group"],
                )
            )
        except (InvalidOperation, ValueError):
            raise ValueError(
                f"line {number} does not read as '2 of Finance from 200.00' "
                f"(or '1 of Support', '2 from 500.00'): {line!r}"
            ) from None
    return tuple(sorted(bands, key=_band_order))


def bands_text(bands: Iterable[ApproverBand]) -> str:
    return "\n".join(band.describe() for band in sorted(bands, key=_band_order))
