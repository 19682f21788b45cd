"""Backward compatibility of clickstream schema versions: may data written under the old one be rejected by the new?"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spark_jobs.contracts.events_rules import resolve_ref

#: Keywords that never change which documents are valid.
_ANNOTATIONS = {"description", "title", "$comment", "examples", "default", "deprecated", "$id", "$schema",
                "readOnly", "writeOnly"}
#: Keywords :func:`breaking_changes` understands; any other keyword that differs is reported as breaking.
_UNDERSTOOD = {"type", "properties", "required", "additionalProperties", "enum", "const", "pattern", "format",
               "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
               "minItems", "maxItems", "items", "allOf", "if", "then", "$defs", "$ref"}


def breaking_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why data valid under ``old`` could be rejected by (or read differently under) ``new``; empty = compatible.

    Backward compatibility for readers of already-written data: every document
    ``old`` accepts must stay acceptable to ``new``. Checked, at every object
    level (top level, ``$ref`` targets, the per-event-type ``then`` blocks):

    * a field (property) removed, where the object does not allow unknown fields;
    * a field added with constraints where the old object allowed any value
      under that name (old data may hold it with another type);
    * a new required field;
    * a type narrowed (``number`` -> ``integer`` narrows; ``integer`` -> ``number`` widens);
    * an enum value removed, an enum or ``const`` added, a ``const`` changed;
    * ``additionalProperties`` made stricter (allowed -> false);
    * a ``pattern`` or ``format`` added or changed (regex containment is not
      decided: any change counts, loosening one included);
    * ``minimum``/``exclusiveMinimum``/``minLength``/``minItems`` raised or
      added, the ``max`` counterparts lowered or added;
    * an ``allOf`` rule added whose condition old data can meet (a rule for a
      new event type is fine), or a ``then`` block tightened (recursively).

    Not checked (reported as breaking when they differ, since they cannot be
    proven safe): any other keyword (``oneOf``, ``anyOf``, ``not``,
    ``multipleOf``, ``dependentRequired``, ``else``, ...) and non-local ``$ref``.
    Not covered at all: semantic changes that keep the schema text (a field that
    changes meaning), and the rules outside the schema (size limit, future-time limit).
    """
    problems: list[str] = []
    _compare(old, new, old, new, "(record)", problems)
    return problems


def _types(node: Mapping[str, Any]) -> set[str] | None:
    t = node.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _bound_changed(old: Any, new: Any, *, lower: bool) -> bool:
    if new is None:
        return False
    if old is None:
        return True
    return bool(new > old) if lower else bool(new < old)


def _compare(old: Mapping[str, Any], new: Mapping[str, Any], old_root: Mapping[str, Any],
             new_root: Mapping[str, Any], where: str, out: list[str]) -> None:
    old = resolve_ref(old_root, old)
    new = resolve_ref(new_root, new)
    keys = (set(old) | set(new)) - _ANNOTATIONS
    for k in sorted(keys - _UNDERSTOOD):
        if old.get(k) != new.get(k):
            out.append(f"{where}: keyword {k!r} changed ({old.get(k)!r} -> {new.get(k)!r}); "
                       "this checker cannot prove it compatible")

    old_t, new_t = _types(old), _types(new)
    if new_t is not None:
        widened = set(new_t) | ({"integer"} if "number" in new_t else set())
        if old_t is None:
            out.append(f"{where}: type {sorted(new_t)} added where any type was allowed")
        elif not old_t <= widened:
            out.append(f"{where}: type changed from {sorted(old_t)} to {sorted(new_t)}")

    if "enum" in new:
        if "enum" not in old:
            out.append(f"{where}: enum {new['enum']} added")
        else:
            removed = [v for v in old["enum"] if v not in new["enum"]]
            if removed:
                out.append(f"{where}: enum value(s) {removed} removed")
    if "const" in new and ("const" not in old or old["const"] != new["const"]):
        out.append(f"{where}: const {old.get('const')!r} -> {new['const']!r}")
    for k in ("pattern", "format"):
        if k in new and old.get(k) != new[k]:
            out.append(f"{where}: {k} {old.get(k)!r} -> {new[k]!r}")
    for k in ("minimum", "exclusiveMinimum", "minLength", "minItems"):
        if _bound_changed(old.get(k), new.get(k), lower=True):
            out.append(f"{where}: {k} raised {old.get(k)!r} -> {new[k]!r}")
    for k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems"):
        if _bound_changed(old.get(k), new.get(k), lower=False):
            out.append(f"{where}: {k} lowered {old.get(k)!r} -> {new[k]!r}")

    old_closed = old.get("additionalProperties", True) is False
    if new.get("additionalProperties", True) is False and not old_closed:
        out.append(f"{where}: additionalProperties became false (old data may carry other fields)")
    elif isinstance(old.get("additionalProperties"), dict) and isinstance(new.get("additionalProperties"), dict):
        _compare(old["additionalProperties"], new["additionalProperties"], old_root, new_root,
                 f"{where}.<additional>", out)

    new_required = sorted(set(new.get("required", [])) - set(old.get("required", [])))
    for name in new_required:
        out.append(f"{_join(where, name)}: new required field (old producers do not send it)")

    old_props: Mapping[str, Any] = old.get("properties", {})
    new_props: Mapping[str, Any] = new.get("properties", {})
    new_closed = new.get("additionalProperties", True) is False
    for name, old_node in old_props.items():
        if name not in new_props:
            if new_closed:
                out.append(f"{_join(where, name)}: field removed (the object allows no unknown fields)")
            elif _constrains(new.get("additionalProperties")):
                out.append(f"{_join(where, name)}: field removed; unknown fields must now match additionalProperties")
            else:
                out.append(f"{_join(where, name)}: field removed (readers of old data lose it)")
        else:
            _compare(old_node, new_props[name], old_root, new_root, _join(where, name), out)
    for name in new_props:
        if name not in old_props and not old_closed and _constrains(new_props[name]):
            out.append(f"{_join(where, name)}: new field with constraints where old data may hold any value "
                       "under that name")

    if "items" in old and "items" in new:
        _compare(old["items"], new["items"], old_root, new_root, f"{where}[]", out)
    elif "items" in new:
        out.append(f"{where}: items constraint added")

    _compare_conditionals(old, new, old_root, new_root, where, out)


def _constrains(node: Any) -> bool:
    if node is None or node is True:
        return False
    if node is False:
        return True
    return bool(set(node) - _ANNOTATIONS)


def _join(where: str, name: str) -> str:
    return name if where == "(record)" else f"{where}.{name}"


def _condition_value(block: Mapping[str, Any]) -> tuple[str, Any] | None:
    """``if: {properties: {F: {const: V}}}`` -> ``(F, V)``."""
    props = block.get("if", {}).get("properties", {})
    if len(props) == 1:
        (name, node), = props.items()
        if isinstance(node, dict) and "const" in node:
            return name, node["const"]
    return None


def _compare_conditionals(old: Mapping[str, Any], new: Mapping[str, Any], old_root: Mapping[str, Any],
                          new_root: Mapping[str, Any], where: str, out: list[str]) -> None:
    def key(block: Mapping[str, Any]) -> str:
        return json.dumps(block.get("if"), sort_keys=True)

    old_blocks = {key(b): b for b in old.get("allOf", [])}
    for block in new.get("allOf", []):
        cond = _condition_value(block)
        label = f"{where}: allOf rule if {json.dumps(block.get('if'), sort_keys=True)}"
        if set(block) - {"if", "then"}:
            if old_blocks.get(key(block)) != block:
                out.append(f"{label}: has keywords other than if/then; this checker cannot prove it compatible")
            continue
        previous = old_blocks.get(key(block))
        if previous is not None:
            _compare(previous.get("then", {}), block.get("then", {}), old_root, new_root,
                     f"{where}[if {cond[0]}={cond[1]!r}]" if cond else label, out)
            continue
        if cond is not None:
            name, value = cond
            old_field = resolve_ref(old_root, old.get("properties", {}).get(name, {}))
            allowed = old_field.get("enum", [old_field["const"]] if "const" in old_field else None)
            if allowed is not None and value not in allowed:
                continue  # old data cannot meet the condition (e.g. a new event type)
        out.append(f"{label}: new rule that old data can meet")
