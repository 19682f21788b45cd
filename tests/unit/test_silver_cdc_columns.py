"""Which payload columns widen silver: only those PostgreSQL's table has (forged keys are refused)."""

from __future__ import annotations

from spark_jobs.silver.cdc_columns import admit_columns, new_columns

SILVER = ["customer_id", "email", "Note"]


def test_new_columns_are_the_payload_names_silver_lacks_in_any_case() -> None:
    assert new_columns(SILVER, ["email", "EMAIL", "note", "nickname", "Nickname", "nickname"]) == [
        "Nickname", "nickname"]
    assert new_columns(SILVER, []) == []


def test_a_column_postgresql_has_is_added_with_its_type() -> None:
    assert admit_columns(SILVER, ["nickname"], {"nickname": "STRING"}) == ({"nickname": "STRING"}, [])


def test_a_forged_column_is_refused_not_added() -> None:
    # The payload key is not a column of PostgreSQL's table: forged by a writer of the topic, or dropped since.
    assert admit_columns(SILVER, ["forged_1", "nickname", "forged_2"], {"nickname": "STRING"}) == (
        {"nickname": "STRING"}, ["forged_1", "forged_2"])


def test_a_forged_spelling_neither_hides_nor_borrows_a_real_column() -> None:
    # "Nickname" sorts first; PostgreSQL has only "nickname": the forged spelling is refused, the real one added.
    candidates = new_columns(SILVER, ["nickname", "Nickname"])
    assert admit_columns(SILVER, candidates, {"nickname": "BIGINT"}) == ({"nickname": "BIGINT"}, ["Nickname"])
    # Both spellings real (quoted identifiers in PostgreSQL): Spark holds one; the other stays in _extra.
    assert admit_columns(SILVER, candidates, {"nickname": "INT", "Nickname": "STRING"}) == ({"Nickname": "STRING"}, [])
