"""Lookup tables as LiteRT's builtin hashtables (issue 45).

A ``tf.lookup.StaticHashTable`` captured by the program (Keras' ``StringLookup``, ``IntegerLookup``, a user's
table) is read through ``LookupTableFindV2`` on its resource handle. Its contents are read now (the table is
immutable) and the find becomes LiteRT's builtins, as ``tensorflow/lite/kernels/hashtable*.cc`` define them:

- every function that finds in a table gets a ``HASHTABLE`` op (options ``table_id``, ``key_dtype``,
  ``value_dtype``) whose output, a resource of shape [1], names the table; the find is ``HASHTABLE_FIND``
  (resource, keys, default value: the output has the keys' shape);
- an init function holds, per table, its ``HASHTABLE`` and a ``HASHTABLE_IMPORT`` of the keys and values as
  constants; a ``CALL_ONCE`` of it comes first in every signature (the interpreter shares the table resource
  between its subgraphs: one import serves every signature and every invoke);
- ``LookupTableSizeV2`` is the table's size, a constant.

LiteRT's hashtable takes string keys with int64 values, or int64 keys with string values, only
(``PrepareHashtable``). A table of numeric keys and values (``IntegerLookup``: int64 -> int64) is written as
comparisons instead (:func:`_compared`, exact); any other is a :class:`~fuselite.errors.ConversionError` naming
the op, its Keras layer and the types. Tables with equal contents share one ``table_id`` and one import.

Example::

    tables = materialize_tables(module)   # [{"key_dtype", "value_dtype", "size", "form", ("table_id")}, ...]
"""

from __future__ import annotations

import hashlib

import numpy as np

from fuselite.errors import ConversionError
from fuselite.ir import Function, Module, Op, Value
from fuselite.passes.variables import unique_function_name

FIND, SIZE = "LookupTableFindV2", "LookupTableSizeV2"
INIT_FUNCTION = "fuselite_init_tables"
# (key, value) types LiteRT's HASHTABLE takes (kernels/hashtable.cc, PrepareHashtable)
BUILTIN_PAIRS = {("string", "int64"), ("int64", "string")}
# other tables compared key by key (_compared): numeric keys, numeric values
NUMERIC_KEYS = {"int32", "int64"}
NUMERIC_VALUES = {"int32", "int64", "float32"}


def _is_table(v: Value | None) -> bool:
    return v is not None and v.dtype == "resource" and "handle" in v.meta


def _type_name(dtype) -> str:
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


def _contents(op: Op, key_dtype, value_dtype) -> tuple[np.ndarray, np.ndarray]:
    """The table's keys and values now, sorted by key (a stable file for equal tables)."""
    import tensorflow as tf

    from fuselite.tf_dtypes import tf_dtype_for

    try:
        keys, values = tf.raw_ops.LookupTableExportV2(table_handle=op.inputs[0].meta["handle"],
                                                      Tkeys=tf_dtype_for(key_dtype), Tvalues=tf_dtype_for(value_dtype))
    except Exception as e:  # not an exportable table (a table of another kind)
        raise ConversionError(f"{op.describe()}: cannot read the lookup table's contents "
                              f"({type(e).__name__}: {str(e).strip().splitlines()[0][:200]})") from None
    keys, values = np.asarray(keys.numpy()), np.asarray(values.numpy())
    order = np.argsort(keys, kind="stable")
    return keys[order], values[order]


def _digest(keys: np.ndarray, values: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for arr in (keys, values):
        h.update(str(arr.dtype.kind).encode())
        h.update(b"\0".join(bytes(x) if isinstance(x, bytes) else str(x).encode() for x in arr.ravel())
                 if arr.dtype.kind in "SOU" else np.ascontiguousarray(arr).tobytes())
    return h.digest()


def _string_const(fn: Function, arr: np.ndarray, name: str) -> Value:
    v = fn.const(np.asarray([x if isinstance(x, bytes) else str(x).encode() for x in arr.ravel()], dtype=object)
                 .reshape(arr.shape), name)
    v.dtype = "string"
    return v


def _const(fn: Function, arr: np.ndarray, dtype, name: str) -> Value:
    return _string_const(fn, arr, name) if dtype == "string" else fn.const(arr.astype(dtype), name)


def _hashtable(fn: Function, table: dict) -> Op:
    return fn.make_op("tfl.HASHTABLE", [], [("resource", (1,))],
                      {"table_id": table["table_id"], "key_dtype": table["key_dtype"],
                       "value_dtype": table["value_dtype"], "_pinned": True, "_stateful": True},
                      name=f"hashtable_{table['table_id']}")


def materialize_tables(module: Module) -> list[dict]:
    """Replace every find in (and size of) a captured lookup table by LiteRT's hashtable builtins, with an init
    function that imports each table once. Returns one record per table for the report (``[]`` and no change
    when the program has no table)."""
    tables: dict[bytes, dict] = {}  # contents digest -> record
    compared: list[dict] = []  # numeric tables, written as comparisons
    uses: dict[str, dict[bytes, Op]] = {}  # function name -> digest -> its HASHTABLE op
    for fn in list(module.functions.values()):
        for op in list(fn.ops):
            if op.kind not in (FIND, SIZE) or not _is_table(op.inputs[0] if op.inputs else None):
                continue
            if op.kind == SIZE:
                size = _table_size(op)
                fn.replace_op(op, [], [fn.const(np.asarray(size, np.int64), f"{op.name}/size")])
                continue
            key_dtype, value_dtype = op.inputs[1].dtype, op.outputs[0].dtype
            pair = (_type_name(key_dtype), _type_name(value_dtype))
            if pair not in BUILTIN_PAIRS and not (pair[0] in NUMERIC_KEYS and pair[1] in NUMERIC_VALUES):
                raise ConversionError(
                    f"{op.describe()}: a lookup table from {pair[0]} to {pair[1]}; LiteRT's HASHTABLE maps string "
                    "to int64 or int64 to string only (kernels/hashtable.cc), and fuselite compares numeric keys "
                    "only: keep this lookup outside the model")
            keys, values = _contents(op, key_dtype, value_dtype)
            if pair not in BUILTIN_PAIRS:
                ops, out = _compared(fn, op, keys, values)
                fn.replace_op(op, ops, [out])
                compared.append({"key_dtype": pair[0], "value_dtype": pair[1], "size": int(len(keys)),
                                 "form": "compared"})
                continue
            digest = _digest(keys, values)
            if digest not in tables:
                tables[digest] = {"table_id": len(tables), "key_dtype": key_dtype, "value_dtype": value_dtype,
                                  "keys": keys, "values": values}
            per_fn = uses.setdefault(fn.name, {})
            if digest not in per_fn:
                per_fn[digest] = _hashtable(fn, tables[digest])
                fn.ops.insert(0, per_fn[digest])
            find = fn.make_op("tfl.HASHTABLE_FIND", [per_fn[digest].outputs[0], op.inputs[1], op.inputs[2]],
                              [(value_dtype, op.outputs[0].shape)], name=op.name, location=op.location)
            fn.replace_op(op, [find], find.outputs)
    if not tables:
        return compared
    init = module.add(Function(unique_function_name(module, INIT_FUNCTION)))
    for t in tables.values():
        handle = _hashtable(init, t)
        init.ops.append(handle)
        init.add_op("tfl.HASHTABLE_IMPORT", [handle.outputs[0],
                                              _const(init, t["keys"], t["key_dtype"], f"table_{t['table_id']}_keys"),
                                              _const(init, t["values"], t["value_dtype"],
                                                     f"table_{t['table_id']}_values")], [],
                    {"_stateful": True}, name=f"table_{t['table_id']}/import")
    for name in dict.fromkeys(module.signatures.values()):
        fn = module.functions[name]
        fn.ops.insert(0, fn.make_op("tfl.CALL_ONCE", [], [], {"init_subgraph_index": "@" + init.name,
                                                              "_pinned": True}, name="init_tables"))
    return [{"table_id": t["table_id"], "key_dtype": _type_name(t["key_dtype"]),
             "value_dtype": _type_name(t["value_dtype"]), "size": int(len(t["keys"])), "form": "HASHTABLE"}
            for t in tables.values()] + compared


def _compared(fn: Function, op: Op, keys: np.ndarray, values: np.ndarray) -> tuple[list[Op], Value]:
    """A numeric table (IntegerLookup's int64 -> int64) as builtins, exactly: each key compared with every table
    key (EQUAL of the keys with a new last axis), the position of the match (ARG_MAX of it as int32) gathers the
    value, and where none matches (REDUCE_ANY false) the default value (SELECT_V2). Work and memory grow with
    the table's size times the keys'."""
    x, default = op.inputs[1], op.inputs[2]
    shape = tuple(x.shape) if x.shape is not None else None
    wide = None if shape is None else (*shape, len(keys))
    made: list[Op] = []

    def add(kind, inputs, dtype, out_shape, attrs=None):
        made.append(fn.make_op("tfl." + kind, inputs, [(dtype, out_shape)], attrs or {},
                               name=f"{op.name}/{kind.lower()}", location=op.location))
        return made[-1].outputs[0]

    i32 = np.dtype(np.int32)
    last = add("EXPAND_DIMS", [x, fn.const(np.asarray(-1, np.int32))], x.dtype, None if shape is None else (*shape, 1))
    eq = add("EQUAL", [last, fn.const(keys.astype(x.dtype), f"{op.name}/keys")], np.dtype(np.bool_), wide)
    axis = fn.const(np.asarray([-1], np.int32))
    found = add("REDUCE_ANY", [eq, axis], np.dtype(np.bool_), shape, {"keep_dims": False})
    hits = add("CAST", [eq], i32, wide)
    at = add("ARG_MAX", [hits, fn.const(np.asarray([-1], np.int32))], i32, shape, {"output_type": i32})
    got = add("GATHER", [fn.const(values, f"{op.name}/values"), at], values.dtype, shape, {"axis": 0, "batch_dims": 0})
    out = add("SELECT_V2", [found, got, default], values.dtype, shape)
    return made, out


def _table_size(op: Op) -> int:
    import tensorflow as tf

    return int(tf.raw_ops.LookupTableSizeV2(table_handle=op.inputs[0].meta["handle"]).numpy())
