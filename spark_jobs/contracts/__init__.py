"""Per-table contracts: keys, ordering, schema, names. Validated at import."""
