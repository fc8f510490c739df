"""The SandboxWarmPoolAutoscaler's pure rules around the sizing decision (:mod:`.plan`):
whether it may write the target's replicas (the other-writer rule), and the status it reports.
No I/O, no clock reads.

**The other-writer rule** (docs/design/autoscaler.md, "Another writer: reported, not fought").
The autoscaler remembers the replica counts that are *ours*: the value it last wrote, and the
value it is about to write (so that a write whose answer was lost, or that lost a race, is never
mistaken for someone else's). Each pass reads the target's ``/scale``:

- the spec changed since the last pass (a new autoscaler, or min/max/target edited): it takes the
  target over and writes its recommendation;
- the target's replicas are ours (or equal the recommendation): it writes the recommendation if
  it differs;
- otherwise another writer (an HPA, a GitOps sync, a person) set them: the autoscaler reports
  ``AbleToScale=False``/``ConflictingWriter`` with a Warning Event, and **does not write** —
  until the target's replicas are ours again (or equal its recommendation), or its spec changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentsandbox.api.conditions import FALSE, TRUE, make_condition
from agentsandbox.controllers.autoscaler.plan import Decision

CONDITION_READY = "Ready"
CONDITION_ABLE_TO_SCALE = "AbleToScale"
CONDITION_SCALING_ACTIVE = "ScalingActive"
# present (True) only while other autoscaled pools share the target's template
CONDITION_SHARED_TEMPLATE = "SharedTemplate"

REASON_READY_FOR_NEW_SCALE = "ReadyForNewScale"
REASON_SUCCEEDED_RESCALE = "SucceededRescale"
REASON_CONFLICTING_WRITER = "ConflictingWriter"
REASON_FAILED_GET_SCALE = "FailedGetScale"
REASON_FAILED_UPDATE_SCALE = "FailedUpdateScale"
REASON_INVALID_TARGET = "InvalidTarget"
REASON_UNSUPPORTED_TARGET = "UnsupportedTarget"
REASON_AMBIGUOUS_TARGET = "AmbiguousTarget"
REASON_AUTOSCALED_POOLS_SHARE_TEMPLATE = "AutoscaledPoolsShareTemplate"

EVENT_SUCCESSFUL_RESCALE = "SuccessfulRescale"
EVENT_CONFLICTING_WRITER = "ConflictingWriter"
EVENT_SCALING_RESUMED = "ScalingResumed"
EVENT_FAILED_GET_SCALE = "FailedGetScale"
EVENT_FAILED_RESCALE = "FailedRescale"
EVENT_AMBIGUOUS_TARGET = "AmbiguousTarget"

_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


@dataclass(frozen=True)
class Ownership:
    """What the autoscaler knows about who set the target's replicas."""

    generation: int | None = None  # the spec generation it last acted under (None: never)
    ours: frozenset[int] = frozenset()  # replica counts it wrote or is writing
    conflict: int | None = None  # the other writer's value while it stands back

    @classmethod
    def from_status(cls, generation: int | None, status: Mapping[str, Any]) -> Ownership:
        """Rebuilt after a restart from the status a previous process wrote."""
        observed = status.get("observedGeneration")
        ours = {
            int(v)
            for v in (status.get("lastScaledReplicas"), status.get("desiredReplicas"))
            if isinstance(v, int)
        }
        able = next(
            (c for c in status.get("conditions") or () if c.get("type") == CONDITION_ABLE_TO_SCALE),
            None,
        )
        conflict = None
        if able is not None and able.get("reason") == REASON_CONFLICTING_WRITER:
            current = status.get("currentReplicas")
            conflict = int(current) if isinstance(current, int) else -1
        return cls(
            generation=int(observed) if isinstance(observed, int) else None,
            ours=frozenset(ours),
            conflict=conflict,
        )


@dataclass(frozen=True)
class Verdict:
    """What to do with the target this pass, and what to report."""

    write: int | None  # the replicas to write to /scale; None: no write
    ownership: Ownership  # the state to keep (the write included)
    able: tuple[str, str, str]  # AbleToScale (status, reason, message)
    events: tuple[tuple[str, str, str], ...] = field(default=())  # (type, reason, note)


def arbitrate(generation: int, own: Ownership, target: str, current: int, desired: int) -> Verdict:
    """The other-writer rule (module docstring). ``target`` names the target in messages."""
    events: list[tuple[str, str, str]] = []
    if own.generation == generation and own.ours:
        mine = current in own.ours or current == desired
        if not mine:
            # another writer: stand back; one Warning when it appears or moves again
            if current != own.conflict:
                events.append(
                    ("Warning", EVENT_CONFLICTING_WRITER, _conflict_note(target, own, current))
                )
            return Verdict(
                None,
                Ownership(generation, own.ours, current),
                (FALSE, REASON_CONFLICTING_WRITER, _conflict_message(target, own, current)),
                tuple(events),
            )
        if own.conflict is not None:
            events.append(
                (
                    "Normal",
                    EVENT_SCALING_RESUMED,
                    f"{target} has {current} replicas again, a value of ours: scaling resumed",
                )
            )
    # ours (or taken over at a new spec generation): set the recommendation
    if current != desired:
        return Verdict(
            desired,
            Ownership(generation, frozenset({current, desired})),
            (TRUE, REASON_READY_FOR_NEW_SCALE, f"setting {target} to {desired} replicas"),
            tuple(events),
        )
    return Verdict(
        None,
        Ownership(generation, frozenset({current})),
        (TRUE, REASON_READY_FOR_NEW_SCALE, f"{target} has the recommended {current} replicas"),
        tuple(events),
    )


def _ours_text(own: Ownership) -> str:
    return " or ".join(str(v) for v in sorted(own.ours)) or "?"


def _conflict_message(target: str, own: Ownership, current: int) -> str:
    return (
        f"{target} has {current} replicas, not {_ours_text(own)} as this autoscaler set: another "
        "writer (an HPA, a GitOps sync, a person) changed them. Not writing until they are "
        f"{_ours_text(own)} again or this autoscaler's spec changes"
    )


def _conflict_note(target: str, own: Ownership, current: int) -> str:
    return (
        f"{target} replicas changed to {current} by another writer (this autoscaler set "
        f"{_ours_text(own)}); standing back until they are ours again or the spec changes"
    )


def condition_reason(reason: str, fallback: str = "Decided") -> str:
    """A decision's reason as a valid condition reason."""
    return reason if _REASON.match(reason or "") else fallback


@dataclass(frozen=True)
class StatusInput:
    """Everything the status of one pass is made of."""

    generation: int
    current: int | None  # the target's replicas as read (None: not read)
    decision: Decision | None
    able: tuple[str, str, str]
    active: tuple[str, str, str]
    last_scaled: int | None = None
    last_scale: Mapping[str, Any] | None = None  # {time, fromReplicas, toReplicas, reason, message}
    # the SharedTemplate condition's message (None: no other autoscaled pool on the template)
    shared_template: str | None = None
    window: Mapping[str, Any] | None = None  # the arrival window to keep (ArrivalBins.to_status)
    estimates: Mapping[str, Any] | None = None  # the estimates to keep (Memory.estimates)


def build_status(
    before: Mapping[str, Any], given: StatusInput, now_text: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the status fields to write, the conditions): the previous values carried over where
    this pass has none. Numbers are rounded so that a status is written only when something a
    reader cares about changed."""
    out: dict[str, Any] = {"observedGeneration": given.generation}
    if given.current is not None:
        out["currentReplicas"] = given.current
    elif isinstance(before.get("currentReplicas"), int):
        out["currentReplicas"] = before["currentReplicas"]
    d = given.decision
    if d is not None:
        out["desiredReplicas"] = d.replicas
        out["arrivalRate"] = round(d.arrival_rate, 3)
        out["refillSeconds"] = round(d.refill_time, 2)
        out["predictedWarmShare"] = round(d.predicted_warm_share, 4)
        if d.realised_warm_share is not None:
            out["realisedWarmShare"] = round(d.realised_warm_share, 4)
        elif before.get("realisedWarmShare") is not None:
            out["realisedWarmShare"] = before["realisedWarmShare"]
    else:
        for key in (
            "desiredReplicas",
            "arrivalRate",
            "refillSeconds",
            "predictedWarmShare",
            "realisedWarmShare",
        ):
            if before.get(key) is not None:
                out[key] = before[key]
    if given.window is not None:
        out["window"] = dict(given.window)
    elif before.get("window") is not None:
        out["window"] = before["window"]
    if given.estimates is not None:
        out["estimates"] = dict(given.estimates)
    elif before.get("estimates") is not None:
        out["estimates"] = before["estimates"]
    last_scaled = given.last_scaled
    if last_scaled is None and isinstance(before.get("lastScaledReplicas"), int):
        last_scaled = before["lastScaledReplicas"]
    if last_scaled is not None:
        out["lastScaledReplicas"] = last_scaled
    if given.last_scale is not None:
        out["lastScaleTime"] = given.last_scale["time"]
        out["lastScale"] = {k: v for k, v in given.last_scale.items() if k != "time"}
    else:
        for key in ("lastScaleTime", "lastScale"):
            if before.get(key) is not None:
                out[key] = before[key]
    able_s, able_r, able_m = given.able
    active_s, active_r, active_m = given.active
    if able_s == TRUE and active_s == TRUE:
        ready = (TRUE, active_r, active_m)
    elif able_s != TRUE:
        ready = (FALSE, able_r, able_m)
    else:
        ready = (FALSE, active_r, active_m)
    conditions = [
        make_condition(CONDITION_READY, *ready, observed_generation=given.generation),
        make_condition(CONDITION_ABLE_TO_SCALE, *given.able, observed_generation=given.generation),
        make_condition(
            CONDITION_SCALING_ACTIVE, *given.active, observed_generation=given.generation
        ),
    ]
    if given.shared_template:
        conditions.append(
            make_condition(
                CONDITION_SHARED_TEMPLATE,
                TRUE,
                REASON_AUTOSCALED_POOLS_SHARE_TEMPLATE,
                given.shared_template,
                observed_generation=given.generation,
            )
        )
    return out, [dict(c) for c in conditions]


def merge_conditions(
    before: Sequence[Mapping[str, Any]] | None,
    new: Sequence[Mapping[str, Any]],
    now_text: str,
) -> list[dict[str, Any]]:
    """``new`` with each lastTransitionTime kept from ``before`` when the status did not flip."""
    old = {c.get("type"): c for c in before or ()}
    out = []
    for cond in new:
        prev = old.get(cond["type"])
        when = (
            prev.get("lastTransitionTime")
            if prev is not None and prev.get("status") == cond["status"]
            else None
        )
        out.append({**cond, "lastTransitionTime": when or now_text})
    return out
