"""The clickstream contract: schema files, validation messages, reason codes, backward compatibility."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import pytest

from spark_jobs.contracts.clickstream import (
    EVENT_TYPES,
    INVALID_VALUE,
    MISSING_FIELD,
    REASONS,
    WRONG_TYPE,
    ContractError,
    check_record,
    event_errors,
    format_event_time,
    load_schema,
    parse_event_time,
    released_schemas,
)
from spark_jobs.contracts.events_compat import breaking_changes
from spark_jobs.contracts.events_rules import field_rules

NOW = datetime(2026, 11, 22, 5, 0, tzinfo=UTC)


def good(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"event_id": "0b8e7f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "event_type": "purchase", "user_id": 7,
                           "session_id": "s-1", "event_time": "2026-11-22T05:00:00.123Z",
                           "properties": {"order_id": "o-1", "revenue": "12.34", "currency": "EUR"},
                           "schema_version": 1}
    doc.update(changes)
    return doc


# --------------------------------------------------------------------------- the files


def test_schema_is_valid_draft_2020_12_and_closed() -> None:
    from jsonschema import Draft202012Validator

    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"].endswith("/2020-12/schema")
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(schema["properties"])
    assert tuple(schema["properties"]["event_type"]["enum"]) == EVENT_TYPES


def test_released_versions_ship_as_package_data() -> None:
    folder = resources.files("spark_jobs.contracts").joinpath("events")
    assert folder.joinpath("clickstream.schema.json").is_file()
    assert "clickstream.v1.schema.json" in released_schemas()


def test_current_schema_breaks_no_released_version() -> None:
    """A schema change that would break readers of already-written data fails here."""
    current = load_schema()
    problems = {name: breaking_changes(old, current) for name, old in released_schemas().items()}
    assert problems == {name: [] for name in problems}


def test_spark_rules_cover_every_event_type() -> None:
    rules = field_rules()
    assert set(rules.by_event_type) == set(EVENT_TYPES)
    assert [f.name for f in rules.fields] == list(load_schema()["properties"])
    assert not rules.additional_fields


def test_spark_rules_refuse_what_spark_would_ignore() -> None:
    schema = load_schema()
    schema["properties"]["user_id"]["multipleOf"] = 2
    with pytest.raises(ContractError, match=r"user_id: keyword\(s\) \['multipleOf'\] are not applied"):
        field_rules(schema)


# --------------------------------------------------------------------------- validation


def test_valid_event_has_no_errors() -> None:
    assert event_errors(good()) == []
    for event_type, props in [("page_view", {"page": "/"}), ("add_to_cart", {"product_id": 1, "quantity": 1,
                                                                              "price": "0.99"}),
                              ("checkout", {"cart_value": "10"})]:
        assert event_errors(good(event_type=event_type, properties=props)) == []


@pytest.mark.parametrize(("doc", "reason", "starts"), [
    (good(user_id="abc"), WRONG_TYPE, "user_id: expected integer, got str"),
    (good(user_id=None), WRONG_TYPE, "user_id: expected integer, got null"),
    ({k: v for k, v in good().items() if k != "session_id"}, MISSING_FIELD, "session_id: required field is missing"),
    (good(properties={"order_id": "o", "currency": "EUR"}), MISSING_FIELD, "properties.revenue: required"),
    (good(properties={"order_id": "o", "revenue": "1.234", "currency": "EUR"}), INVALID_VALUE,
     'properties.revenue: "1.234" is not valid: a non-negative decimal string'),
    (good(event_type="click"), INVALID_VALUE, "event_type: 'click' is not one of"),
    (good(extra=1), INVALID_VALUE, "extra: unexpected field"),
    (good(event_time="2026-02-30T00:00:00Z"), INVALID_VALUE, "event_time: '2026-02-30T00:00:00Z' is not a real"),
])
def test_errors_name_the_field_and_the_problem(doc: dict[str, Any], reason: str, starts: str) -> None:
    errors = event_errors(doc)
    assert errors and errors[0][0] == reason
    assert errors[0][1].startswith(starts), errors[0][1]
    assert event_errors(doc)[0][1] == errors[0][1]


def test_errors_are_ordered_by_reason() -> None:
    doc = {k: v for k, v in good(user_id="abc", event_type="click").items() if k != "session_id"}
    reasons = [r for r, _ in event_errors(doc)]
    assert reasons == sorted(reasons, key=REASONS.index)
    assert reasons[0] == MISSING_FIELD and WRONG_TYPE in reasons and INVALID_VALUE in reasons


def test_future_rule_needs_the_record_time() -> None:
    doc = good(event_time=format_event_time(NOW + timedelta(seconds=301)))
    assert event_errors(doc) == []
    assert event_errors(doc, received_at=NOW)[0][1].startswith("event_time: ")
    assert event_errors(good(event_time=format_event_time(NOW + timedelta(seconds=300))), received_at=NOW) == []


def test_record_gets_exactly_one_reason() -> None:
    value = json.dumps({k: v for k, v in good(user_id="x").items() if k != "event_id"}).encode()
    assert check_record(value, NOW) == (MISSING_FIELD, "event_id: required field is missing")


def test_event_time_text_round_trips() -> None:
    when = datetime(2026, 11, 22, 5, 0, 0, 123_456, tzinfo=UTC)
    text = format_event_time(when)
    assert text == "2026-11-22T05:00:00.123Z"
    assert parse_event_time(text) == when.replace(microsecond=123_000)
    assert parse_event_time("2026-11-22T05:00:00.5Z") == when.replace(microsecond=500_000)
    assert parse_event_time("2026-11-22T05:00:00Z\n") is None
    with pytest.raises(ValueError, match="no time zone"):
        format_event_time(datetime(2026, 1, 1))  # a naive input on purpose


# --------------------------------------------------------------------------- compatibility


def obj(props: dict[str, Any], required: list[str] | None = None, closed: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": required or list(props)}
    if closed:
        schema["additionalProperties"] = False
    return schema


BASE = obj({"id": {"type": "string"}, "kind": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "integer"}})


def changed(fn: Any) -> dict[str, Any]:
    schema = copy.deepcopy(BASE)
    fn(schema)
    return schema


def test_identical_schema_is_compatible() -> None:
    assert breaking_changes(BASE, copy.deepcopy(BASE)) == []


def test_removed_field_breaks() -> None:
    new = changed(lambda s: (s["properties"].pop("n"), s["required"].remove("n")))
    assert any("n: field removed" in p for p in breaking_changes(BASE, new))


def test_type_change_breaks() -> None:
    new = changed(lambda s: s["properties"]["n"].update(type="string"))
    assert breaking_changes(BASE, new) == ["n: type changed from ['integer'] to ['string']"]


def test_type_widening_is_compatible() -> None:
    new = changed(lambda s: s["properties"]["n"].update(type="number"))
    assert breaking_changes(BASE, new) == []


def test_enum_narrowed_breaks() -> None:
    new = changed(lambda s: s["properties"]["kind"].update(enum=["a"]))
    assert breaking_changes(BASE, new) == ["kind: enum value(s) ['b'] removed"]


def test_enum_widened_is_compatible() -> None:
    new = changed(lambda s: s["properties"]["kind"].update(enum=["a", "b", "c"]))
    assert breaking_changes(BASE, new) == []


def test_new_required_field_breaks() -> None:
    new = changed(lambda s: (s["properties"].update(tag={"type": "string"}), s["required"].append("tag")))
    assert breaking_changes(BASE, new) == ["tag: new required field (old producers do not send it)"]


def test_additive_optional_field_is_compatible() -> None:
    new = changed(lambda s: s["properties"].update(tag={"type": "string"}))
    assert breaking_changes(BASE, new) == []


def test_optional_field_constrained_in_an_open_object_breaks() -> None:
    old = obj({"id": {"type": "string"}}, closed=False)
    new = obj({"id": {"type": "string"}}, closed=False)
    new["properties"]["tag"] = {"type": "string"}
    assert breaking_changes(old, new) == ["tag: new field with constraints where old data may hold any value under "
                                          "that name"]


def test_stricter_additional_properties_breaks() -> None:
    old = obj({"id": {"type": "string"}}, closed=False)
    new = obj({"id": {"type": "string"}}, closed=True)
    assert breaking_changes(old, new) == ["(record): additionalProperties became false (old data may carry other "
                                          "fields)"]
    assert breaking_changes(new, old) == []


def test_const_pattern_and_bounds_tightened_break() -> None:
    new = changed(lambda s: (s["properties"]["n"].update(const=1), s["properties"]["id"].update(pattern="^x"),
                             s["properties"]["n"].update(minimum=0)))
    problems = breaking_changes(BASE, new)
    assert problems == ["id: pattern None -> '^x'", "n: const None -> 1", "n: minimum raised None -> 0"]
    looser = changed(lambda s: s["properties"]["n"].update(minimum=-5))
    assert breaking_changes(changed(lambda s: s["properties"]["n"].update(minimum=0)), looser) == []


def test_unknown_keyword_change_is_reported() -> None:
    new = changed(lambda s: s["properties"]["n"].update(multipleOf=2))
    assert breaking_changes(BASE, new) == ["n: keyword 'multipleOf' changed (None -> 2); this checker cannot prove it "
                                           "compatible"]


def test_conditional_rules_on_the_real_schema() -> None:
    current = load_schema()
    # Tightening a per-event-type rule breaks.
    tighter = copy.deepcopy(current)
    tighter["allOf"][0]["then"]["properties"]["properties"]["required"].append("referrer")
    assert breaking_changes(current, tighter) == [
        "(record)[if event_type='page_view'].properties.referrer: new required field (old producers do not send it)"]
    # A new event type with its own rule is additive.
    wider = copy.deepcopy(current)
    wider["properties"]["event_type"]["enum"].append("search")
    wider["allOf"].append({"if": {"properties": {"event_type": {"const": "search"}}, "required": ["event_type"]},
                           "then": {"properties": {"properties": {"required": ["query"]}}}})
    assert breaking_changes(current, wider) == []
    # Removing an event type breaks.
    narrower = copy.deepcopy(current)
    narrower["properties"]["event_type"]["enum"].remove("checkout")
    assert breaking_changes(current, narrower) == ["event_type: enum value(s) ['checkout'] removed"]
    # Money through $ref: a tighter pattern breaks every field using it.
    money = copy.deepcopy(current)
    money["$defs"]["money"]["pattern"] = "^[0-9]+(?![\\s\\S])"
    assert [p.split(":")[0] for p in breaking_changes(current, money)] == [
        "(record)[if event_type='add_to_cart'].properties.price",
        "(record)[if event_type='checkout'].properties.cart_value",
        "(record)[if event_type='purchase'].properties.revenue"]
