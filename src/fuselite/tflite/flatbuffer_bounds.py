"""The bounds-checked reader of a ``.tflite`` flatbuffer that :mod:`fuselite.tflite.validate` checks with:
every table, vtable, field, offset, vector and string read inside the file, the work a file may ask for bounded
(:data:`WORK_PER_BYTE`), the layout of each table taken from the generated accessors (:func:`schema_tables`),
and :class:`TableView`, a validated table with the object API's attribute names."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

WORK_PER_BYTE = 8  # what reading the file may add up to (a table counts TABLE_WORK, a vector its bytes), per byte
WORK_FREE = 1 << 16  # ... and this much more, whatever the file's size
TABLE_WORK = 32
MAX_DEPTH = 64  # tables within tables (flatbuffers' Verifier's default)
_MAX_OFFSET = 1 << 31  # flatbuffers' offsets are below 2^31 (its verifier's rule)

_I32, _U16 = struct.Struct("<i"), struct.Struct("<H")
_U32 = struct.Struct("<I")
_SCALARS = {"Bool": "<B", "Int8": "<b", "Uint8": "<B", "Int16": "<h", "Uint16": "<H", "Int32": "<i",
            "Uint32": "<I", "Int64": "<q", "Uint64": "<Q", "Float32": "<f", "Float64": "<d"}


@dataclass(frozen=True)
class Field:
    """One field of a schema table: ``key`` its accessor's name ("OpcodeIndex"), ``kind`` one of scalar, string,
    table, union, vector (of scalars) and tables (a vector of tables); ``fmt`` a scalar's or a vector element's
    struct format; ``target`` the table (table, tables) or union enum (union) it holds."""

    key: str
    kind: str
    fmt: str | None = None
    target: str | None = None

    @property
    def name(self) -> str:  # schema.fbs' spelling, for messages: "opcode_index"
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", self.key).lower()


_METHOD = re.compile(r"^    def (\w+)\(self(, j)?\):\n((?:        .*\n|[ \t]*\n)*)", re.M)


def _field(key: str, indexed: bool, code: str) -> Field:
    flags = re.search(r"self\._tab\.Get\(flatbuffers\.number_types\.(\w+)Flags", code)
    obj = re.search(r"obj = (\w+)\(\)", code)
    if "self._tab.Union(" in code:
        return Field(key, "union")
    if indexed and "Indirect(x)" in code and obj:
        return Field(key, "tables", target=obj.group(1))
    if indexed and flags and flags.group(1) in _SCALARS and "self._tab.Vector(o)" in code:
        return Field(key, "vector", _SCALARS[flags.group(1)])
    if not indexed and "self._tab.String(o + self._tab.Pos)" in code:
        return Field(key, "string")
    if not indexed and "Indirect(o + self._tab.Pos)" in code and obj:
        return Field(key, "table", target=obj.group(1))
    if not indexed and flags and flags.group(1) in _SCALARS and "o + self._tab.Pos" in code:
        return Field(key, "scalar", _SCALARS[flags.group(1)])
    raise RuntimeError(f"schema_py_generated: accessor {key} is of a kind fuselite does not read:\n{code}")


@lru_cache(maxsize=1)
def schema_tables() -> tuple[dict[str, dict[int, Field]], dict[str, dict[int, str]]]:
    """``({table: {vtable slot: Field}}, {union enum: {type value: table}})`` of LiteRT's schema, read from
    ``ai_edge_litert.schema_py_generated``'s own accessors (a slot is the field's byte offset in the vtable)."""
    import inspect

    from ai_edge_litert import schema_py_generated as schema

    source = inspect.getsource(schema)
    tables: dict[str, dict[int, Field]] = {}
    unions_of: dict[tuple[str, str], str] = {}  # (table, union accessor) -> union enum
    for cls in source.split("\nclass ")[1:]:
        name, _, body = cls.partition("(object):\n")
        if "self._tab = flatbuffers.table.Table(buf, pos)" in body:
            fields = {}
            for m in _METHOD.finditer(body):
                key, indexed, code = m.groups()
                slot = re.search(r"self\._tab\.Offset\((\d+)\)", code)
                if not slot or "VectorLen(o)" in code or "GetVectorAsNumpy" in code or "return o == 0" in code:
                    continue
                fields[int(slot.group(1))] = _field(key, bool(indexed), code)
            tables[name] = fields
        elif name.endswith("T"):
            for m in re.finditer(r"= (\w+)Creator\(self\.\w+Type, \w+\.(\w+)\(\)\)", body):
                unions_of[(name[:-1], m.group(2))] = m.group(1)
    unions: dict[str, dict[int, str]] = {}
    for m in re.finditer(r"^def (\w+)Creator\(unionType, table\):\n((?:    .*\n)*)", source, re.M):
        enum, body = m.groups()
        members = re.findall(r"if unionType == \w+\.(\w+):\n\s+return (\w+)T\.InitFromBuf", body)
        unions[enum] = {getattr(getattr(schema, enum), member): table for member, table in members}
    for table, fields in tables.items():
        for slot, f in fields.items():
            if f.kind == "union":
                fields[slot] = Field(f.key, "union", target=unions_of[(table, f.key)])
    return tables, unions


# -- the bounds-checked reader ----------------------------------------------------------------------------------

class Bad(Exception):
    """A problem at a place in the file: ``path`` is filled in on the way out ("subgraphs[0].tensors[3].shape")."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what, self.path = what, []


class Reader:
    """Reads tables of ``data`` as dicts (accessor name -> value: a number, bytes, a dict, a numpy view, a list of
    dicts), every read inside the buffer, the work counted."""

    def __init__(self, data):
        self.data, self.n = data, len(data)
        self.tables, self.unions = schema_tables()
        self.budget = WORK_PER_BYTE * self.n + WORK_FREE
        self.depth = 0

    def charge(self, work: int) -> None:
        self.budget -= work
        if self.budget < 0:
            raise Bad(f"its tables and vectors add up to more than {WORK_PER_BYTE} times the file's "
                       f"{self.n:,} bytes: parts of the flatbuffer are named many times over (an honest file names "
                       "each table once); refused rather than read")

    def u32(self, pos: int) -> int:
        if pos < 0 or pos + 4 > self.n:
            raise Bad(f"a 4-byte read at byte {pos} is outside the file ({self.n:,} bytes)")
        return _U32.unpack_from(self.data, pos)[0]

    def follow(self, pos: int) -> int:
        """Where the offset at ``pos`` points."""
        o = self.u32(pos)
        if o == 0 or o >= _MAX_OFFSET or pos + o >= self.n:
            raise Bad(f"the offset {o} at byte {pos} points outside the file ({self.n:,} bytes)")
        return pos + o

    def vector(self, pos: int, item: int) -> tuple[int, int]:
        """(first element's position, length) of the vector at ``pos``, all its bytes inside the file."""
        length = self.u32(pos)
        if pos + 4 + length * item > self.n:
            raise Bad(f"a vector of {length:,} elements at byte {pos} runs past the end of the file "
                       f"({self.n:,} bytes)")
        self.charge(4 + length * item)
        return pos + 4, length

    def table(self, pos: int, name: str) -> dict:
        self.charge(TABLE_WORK)
        self.depth += 1
        try:
            return self._table(pos, name)
        finally:
            self.depth -= 1

    def _table(self, pos: int, name: str) -> dict:
        if self.depth > MAX_DEPTH:
            raise Bad(f"tables nest more than {MAX_DEPTH} deep")
        data, n = self.data, self.n
        if pos + 4 > n:
            raise Bad(f"a table at byte {pos} is outside the file ({n:,} bytes)")
        vt = pos - _I32.unpack_from(data, pos)[0]
        if vt < 0 or vt + 4 > n:
            raise Bad(f"the table at byte {pos} has its vtable at byte {vt}, outside the file ({n:,} bytes)")
        vsize = _U16.unpack_from(data, vt)[0]
        if vsize & 1 or vt + vsize > n:
            raise Bad(f"the vtable at byte {vt} ({vsize} bytes) runs past the end of the file ({n:,} bytes)")
        fields = self.tables[name]
        out: dict = {}
        unions = []
        for slot in range(4, vsize, 2):
            at = _U16.unpack_from(data, vt + slot)[0]
            f = fields.get(slot)
            if not at or f is None:  # absent, or newer than this schema (LiteRT's reader skips it too)
                continue
            try:
                if f.kind == "union":
                    unions.append((f, self.follow(pos + at)))
                else:
                    out[f.key] = self.value(pos + at, f)
            except Bad as e:
                e.path.append(f.name)
                raise
        for f, target in unions:
            kind = self.unions[f.target].get(out.get(f.key + "Type", 0))
            try:
                out[f.key] = self.table(target, kind) if kind else None  # an unknown type: LiteRT reads nothing
            except Bad as e:
                e.path.append(f"{f.name} ({kind})")
                raise
        return out

    def value(self, pos: int, f: Field):
        if f.kind == "scalar":
            size = struct.calcsize(f.fmt)
            if pos + size > self.n:
                raise Bad(f"a field at byte {pos} runs past the end of the file ({self.n:,} bytes)")
            return struct.unpack_from(f.fmt, self.data, pos)[0]
        target = self.follow(pos)
        if f.kind == "string":
            start, length = self.vector(target, 1)
            if start + length >= self.n or self.data[start + length] != 0:
                raise Bad(f"the string at byte {target} does not end in a NUL byte inside the file")
            return bytes(self.data[start:start + length])
        if f.kind == "table":
            return self.table(target, f.target)
        if f.kind == "vector":
            dtype = np.dtype(f.fmt)
            start, length = self.vector(target, dtype.itemsize)
            return np.frombuffer(self.data, dtype, length, start)
        start, length = self.vector(target, 4)  # tables
        items = []
        for i in range(length):
            try:
                items.append(self.table(self.follow(start + 4 * i), f.target))
            except Bad as e:
                e.path.append(f"[{i}]")
                raise
        return items


def location(path: list[str]) -> str:
    return "".join(p if p.startswith("[") else f".{p}" for p in reversed(path)).lstrip(".")


# -- what the model says ----------------------------------------------------------------------------------------

def quoted(b) -> str:
    """A name from the file, for a message: printable (escapes for the rest), one line, at most 80 characters."""
    text = b.decode("utf-8", "replace") if isinstance(b, bytes) else ""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text[:200])
    return text if len(text) <= 80 else text[:77] + "..."




class TableView:
    """A table of a validated model with the object API's attribute names and defaults (``ModelT``'s:
    ``m.subgraphs[0].tensors[3].shapeSignature``, None for an absent vector, string or table, 0 for an absent
    number), read-only; about ten times faster to read than ``ModelT`` (whose accessors are the flatbuffers
    package's Python)."""

    __slots__ = ("_fields", "_values", "_views")

    def __init__(self, table: str, values: dict):
        self._fields, self._values, self._views = _by_attribute(table), values, {}

    def __getattr__(self, attr: str):
        f = self._fields.get(attr)
        if f is None:
            raise AttributeError(attr)
        value = self._values.get(f.key)
        if value is None:
            return 0 if f.kind == "scalar" else None
        if f.kind in ("scalar", "vector", "string"):
            return value
        if attr not in self._views:  # tables: one view each, made once
            if f.kind == "table":
                view = TableView(f.target, value)
            elif f.kind == "tables":
                view = [TableView(f.target, v) for v in value]
            else:  # a union: the table its type names
                view = TableView(schema_tables()[1][f.target][self._values.get(f.key + "Type", 0)], value)
            self._views[attr] = view
        return self._views[attr]


@cache
def _by_attribute(table: str) -> dict[str, Field]:  # the object API's attribute names: "opcodeIndex"
    return {f.key[:1].lower() + f.key[1:]: f for f in schema_tables()[0][table].values()}
