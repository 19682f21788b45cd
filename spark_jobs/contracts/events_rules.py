"""The clickstream schema flattened into per-field rules (top-level fields, per-event-type properties).

The stream's check (:class:`spark_jobs.silver.clickstream_arrow.ContractCheck`)
takes from it the fields that are JSON Schema "integer", to which it applies
the contract's strict 64-bit rule beside jsonschema-rs; ``lake bench contract``
does the same. Any construct outside what is flattened here raises
:class:`ContractError`, so a schema change that rule could miss (an integer the
walk does not reach, a format the reference does not check) fails loudly.
:func:`resolve_ref` is shared with :mod:`spark_jobs.contracts.events_compat`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs.contracts.clickstream import ContractError, load_schema


@dataclass(frozen=True)
class FieldRule:
    """One field of the contract, its keywords flattened (``name`` is relative to its object)."""

    name: str
    json_type: str  # "string" | "integer" | "object"
    required: bool = True
    pattern: str | None = None
    enum: tuple[str, ...] | None = None
    const: Any = None
    minimum: int | None = None
    maximum: int | None = None
    min_length: int | None = None
    max_length: int | None = None


@dataclass(frozen=True)
class ContractRules:
    """The schema flattened: top-level fields, whether others are allowed, the properties of each event type."""

    fields: tuple[FieldRule, ...]
    additional_fields: bool
    by_event_type: Mapping[str, tuple[FieldRule, ...]]


_RULE_KEYWORDS = {"type", "pattern", "enum", "const", "minimum", "maximum", "minLength", "maxLength", "format",
                  "description", "title", "$comment"}


def resolve_ref(schema: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node`` with a local ``$ref`` (``#/...``) replaced by its target, sibling keywords kept."""
    ref = node.get("$ref")
    if ref is None:
        return node
    if not str(ref).startswith("#/"):
        raise ContractError(f"$ref {ref!r}: only local references are supported")
    target: Any = schema
    for part in str(ref)[2:].split("/"):
        target = target[part]
    extra = {k: v for k, v in node.items() if k != "$ref"}
    return {**resolve_ref(schema, target), **extra}


def _rule(schema: Mapping[str, Any], name: str, node: Mapping[str, Any], required: bool, where: str) -> FieldRule:
    node = resolve_ref(schema, node)
    unknown = set(node) - _RULE_KEYWORDS
    if unknown:
        raise ContractError(f"{where}.{name}: keyword(s) {sorted(unknown)} are not applied by the flattened rules "
                            "(spark_jobs.contracts.events_rules)")
    json_type = node.get("type")
    if json_type not in ("string", "integer", "object"):
        raise ContractError(f"{where}.{name}: type {json_type!r} is not supported (string, integer or object)")
    if node.get("format") not in (None, "uuid"):
        raise ContractError(f"{where}.{name}: format {node['format']!r} is not checked by the reference check_record")
    return FieldRule(
        name=name, json_type=json_type, required=required, pattern=node.get("pattern"),
        enum=tuple(node["enum"]) if "enum" in node else None, const=node.get("const"),
        minimum=node.get("minimum"), maximum=node.get("maximum"),
        min_length=node.get("minLength"), max_length=node.get("maxLength"))


def field_rules(schema: Mapping[str, Any] | None = None) -> ContractRules:
    """Flatten the clickstream schema (top-level fields, per-event-type properties).

    Raises :class:`ContractError` for any construct it does not flatten, so a
    schema change the stream's strict-integer rule could miss fails loudly.
    """
    schema = schema if schema is not None else load_schema()
    required = set(schema.get("required", []))
    fields = tuple(_rule(schema, n, node, n in required, "(record)") for n, node in schema["properties"].items())
    by_type: dict[str, tuple[FieldRule, ...]] = {}
    for i, block in enumerate(schema.get("allOf", [])):
        try:
            event_type = block["if"]["properties"]["event_type"]["const"]
            props = block["then"]["properties"]["properties"]
        except (KeyError, TypeError):
            raise ContractError(f"allOf[{i}]: expected if event_type const X then properties rules") from None
        unknown = set(props) - {"required", "properties"}
        if unknown or set(block) - {"if", "then"}:
            raise ContractError(f"allOf[{i}]: only 'required' and 'properties' rules are applied, got {sorted(unknown)}")
        req = set(props.get("required", []))
        rules = [_rule(schema, n, node, n in req, f"properties[{event_type}]")
                 for n, node in props.get("properties", {}).items()]
        rules += [FieldRule(n, "any") for n in sorted(req - set(props.get("properties", {})))]
        by_type[event_type] = tuple(rules)
    return ContractRules(fields, schema.get("additionalProperties", True) is not False, by_type)
