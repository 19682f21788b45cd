"""Arrow columns -> Python lists, fast: the driver's per-record loops start from these.

``ChunkedArray.to_pylist()`` builds an Arrow scalar per value; going through
numpy's object array gives the same Python objects several times faster
(docs/benchmarks.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def py_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The column's values as a list (``str``/``bytes``/``int``/...; None for nulls), as ``to_pylist()`` gives them.

    Strings, binaries and integers without nulls take the fast way; anything
    else (an integer column with nulls, which numpy would turn into floats;
    timestamps, decimals, nested types) falls back to ``to_pylist()``.
    """
    import pyarrow as pa

    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) \
            or pa.types.is_large_binary(kind):
        return list(column.to_numpy(zero_copy_only=False).tolist())
    if pa.types.is_integer(kind) and column.null_count == 0:
        return list(column.to_numpy().tolist())
    return list(column.to_pylist())
