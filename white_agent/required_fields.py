"""The a2a-sdk's request check "every field marked REQUIRED is set", answered without walking what cannot fail it.

Why: the SDK checks every request by visiting every node of the protobuf message and reading each field's options
(:func:`a2a.utils.proto_utils.validate_proto_required_fields`). A first message carries the policy and the tool
schemas as a ``google.protobuf.Struct`` data part of hundreds of nested Struct/Value nodes, none of which can hold a
REQUIRED field: the check then costs several ms (~10 ms on this 2-core machine for tau2's retail tools), more than
everything else of the turn. :func:`required_fields_present` gives the same
verdict (the SDK's rules, the same fields) but plans once per message type which fields can hold a REQUIRED field
somewhere below them, and visits only those; the Struct subtrees are skipped whole.

It only says yes or no: on "no" the caller lets the SDK check the request again, so the error the client gets is
the SDK's own.
"""

from __future__ import annotations

from typing import NamedTuple

from google.api.field_behavior_pb2 import FieldBehavior, field_behavior  # type: ignore[import-untyped]
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message


class _Plan(NamedTuple):
    """For one message type: its REQUIRED fields, and its message fields that can hold one somewhere below."""

    required: tuple[FieldDescriptor, ...]
    nested: tuple[FieldDescriptor, ...]


_PLANS: dict[Descriptor, _Plan] = {}


def _is_repeated(field: FieldDescriptor) -> bool:
    """The SDK's test (protobuf >= 6.31 has ``is_repeated``; older ones the label)."""
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return bool(getattr(field, "label", None) == FieldDescriptor.LABEL_REPEATED)


def _is_required(field: FieldDescriptor) -> bool:
    return FieldBehavior.REQUIRED in field.GetOptions().Extensions[field_behavior]


def _message_fields(descriptor: Descriptor) -> list[FieldDescriptor]:
    """The fields the SDK recurses into (message-typed ones, maps included: their entries are messages)."""
    return [f for f in descriptor.fields if f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type is not None]


def _plan_types_from(root: Descriptor) -> None:
    """Plan every message type reachable from ``root`` (types can be recursive: a fixpoint, not a recursion)."""
    reachable: list[Descriptor] = []
    seen = {root}
    stack = [root]
    while stack:
        descriptor = stack.pop()
        reachable.append(descriptor)
        for field in _message_fields(descriptor):
            if field.message_type not in seen:
                seen.add(field.message_type)
                stack.append(field.message_type)
    holds = {d for d in reachable if any(_is_required(f) for f in d.fields)}
    changed = True
    while changed:
        changed = False
        for descriptor in reachable:
            if descriptor not in holds and any(f.message_type in holds for f in _message_fields(descriptor)):
                holds.add(descriptor)
                changed = True
    for descriptor in reachable:
        _PLANS[descriptor] = _Plan(
            required=tuple(f for f in descriptor.fields if _is_required(f)),
            nested=tuple(f for f in _message_fields(descriptor) if f.message_type in holds),
        )


def _plan(descriptor: Descriptor) -> _Plan:
    plan = _PLANS.get(descriptor)
    if plan is None:
        _plan_types_from(descriptor)
        plan = _PLANS[descriptor]
    return plan


def _field_missing(message: Message, field: FieldDescriptor) -> bool:
    """The SDK's rule: a repeated field needs an element, a field with presence must be set, others non-default."""
    if _is_repeated(field):
        return not getattr(message, field.name)
    if field.has_presence:
        return not message.HasField(field.name)
    return bool(getattr(message, field.name) == field.default_value)


def required_fields_present(message: Message) -> bool:
    """True when the SDK's required-field check passes on ``message`` (see the module docstring)."""
    plan = _plan(message.DESCRIPTOR)
    if any(_field_missing(message, field) for field in plan.required):
        return False
    for field in plan.nested:
        value = getattr(message, field.name)
        if not _is_repeated(field):
            if message.HasField(field.name) and not required_fields_present(value):
                return False
        elif field.message_type.GetOptions().map_entry:
            if not all(required_fields_present(v) for v in value.values() if isinstance(v, Message)):
                return False
        elif not all(required_fields_present(item) for item in value):
            return False
    return True
