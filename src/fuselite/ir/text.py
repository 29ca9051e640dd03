"""The IR's text form: :func:`format_module` prints it, :func:`parse_module` reads it back.

One line per op, constants declared where they are first used::

    signature "serving_default" = @main
    func @main(%x:float32[?x4] as "x") {
      %w:float32[4x4] = const array([[1.0, 0.0, 0.0, 0.0], ...], float32)
      %fc:float32[?x4] = tfl.FULLY_CONNECTED(%x, %w, _) {"fused_activation_function": "RELU"}
      return %fc as "y"
    }

* a value is ``%name:dtype[shape]`` where it is defined and ``%name`` where it is used;
  a name with characters other than letters, digits, ``_ . / -`` is quoted
  (``%"dense/BiasAdd:1"``); ``_`` is an omitted optional operand;
* a shape is ``[?x4]``: ``?`` an unknown size, ``[]`` a scalar, ``[*]`` an unknown rank;
* attributes are a Python-literal dict; arrays are ``array(<nested list>, dtype)``;
  attributes that are not plain data (``_node_def``, TensorFlow's own NodeDef kept for
  folding) and ``Value.meta`` are not printed, so a parsed ``tf.*`` op cannot be folded by
  TensorFlow: text-form tests are for passes that do not need it;
* ``name "..."`` and ``loc "file:line"`` follow an op whose name is not the default or
  whose location is known.

``parse_module(format_module(m))`` gives a module that prints the same. With
``elide=N``, constants of more than N elements print as ``array(<elided 4096>, float32)``,
which is for reading only (parsing it is an error).

Example::

    m = parse_module(text)
    some_pass(m)
    assert format_module(m) == expected_text
"""

from __future__ import annotations

import ast
import json
import math
import re

import numpy as np

from fuselite.errors import ConversionError
from fuselite.ir.core import Function, Module, Op, Quantization, Value

_PLAIN_NAME = re.compile(r"[A-Za-z0-9_./\-]+\Z")
_SPECIAL_DTYPES = ("resource", "variant")


class IRParseError(ConversionError):
    """The text is not a well-formed fuselite IR module."""


# -- printing ------------------------------------------------------------------------------


def _name(v: Value, names: dict[int, str]) -> str:
    name = names[v.uid]
    return "%" + (name if _PLAIN_NAME.match(name) else json.dumps(name))


def _dtype(dt) -> str:
    return dt if isinstance(dt, str) else np.dtype(dt).name


def _shape(shape) -> str:
    if shape is None:
        return "[*]"
    return "[" + "x".join("?" if d is None else str(int(d)) for d in shape) + "]"


def _literal(x, elide: int | None) -> str | None:
    """Python-literal text of an attribute value, or None for one that is not plain data."""
    if isinstance(x, np.ndarray):
        if elide is not None and x.size > elide:
            return f"array(<elided {x.size}>, {x.dtype.name})"
        return f"array({_literal(x.tolist(), None)}, {x.dtype.name})"
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, str):
        return json.dumps(x)  # a JSON string is a Python string literal too
    if x is None or isinstance(x, (bool, int, bytes)):
        return repr(x)
    if isinstance(x, float):
        return repr(x) if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))
    if isinstance(x, (list, tuple)):
        items = [_literal(i, elide) for i in x]
        if any(i is None for i in items):
            return None
        if isinstance(x, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    if isinstance(x, dict):
        parts = []
        for k, v in x.items():
            lit = _literal(v, elide)
            if not isinstance(k, str) or lit is None:
                return None
            parts.append(f"{json.dumps(k)}: {lit}")
        return "{" + ", ".join(parts) + "}"
    return None


def _attrs(attrs: dict, elide: int | None) -> str:
    parts = []
    for k, v in attrs.items():
        lit = _literal(v, elide)
        if lit is not None:
            parts.append(f"{json.dumps(k)}: {lit}")
    return "{" + ", ".join(parts) + "}" if parts else ""


def _display_names(fn: Function) -> dict[int, str]:
    """Value uid -> the name printed: its own, made unique within the function if needed."""
    names: dict[int, str] = {}
    taken: set[str] = set()

    def add(v: Value) -> None:
        if v is None or v.uid in names:
            return
        name, i = v.name, 1
        while name in taken:
            name = f"{v.name}#{i}"
            i += 1
        taken.add(name)
        names[v.uid] = name

    for v in fn.inputs:
        add(v)
    for op in fn.ops:
        for v in op.inputs:
            add(v)
        for v in op.outputs:
            add(v)
    for v in fn.outputs:
        add(v)
    return names


def format_function(fn: Function, elide: int | None = None) -> str:
    """The text form of one function (see the module docstring)."""
    names = _display_names(fn)

    def decl(v: Value) -> str:
        return f"{_name(v, names)}:{_dtype(v.dtype)}{_shape(v.shape)}"

    def as_name(i: int, names_list: list[str]) -> str:
        return f" as {json.dumps(names_list[i])}" if i < len(names_list) and names_list[i] else ""

    args = ", ".join(decl(v) + as_name(i, fn.input_names) for i, v in enumerate(fn.inputs))
    attrs = _attrs(fn.attrs, elide)
    lines = [f"func @{fn.name}({args}){' attributes ' + attrs if attrs else ''} {{"]
    declared: set[int] = {v.uid for v in fn.inputs}

    def declare_consts(values) -> None:
        for v in values:
            if v is not None and v.is_const and v.uid not in declared:
                declared.add(v.uid)
                quant = f" quant {json.dumps(v.quant.as_dict())}" if v.quant is not None else ""
                lines.append(f"  {decl(v)} = const {_literal(v.const, elide)}{quant}")

    for op in fn.ops:
        declare_consts(op.inputs)
        outs = ", ".join(decl(o) for o in op.outputs) or "()"
        ins = ", ".join("_" if v is None else _name(v, names) for v in op.inputs)
        text = f"  {outs} = {op.type}({ins})"
        op_attrs = _attrs(op.attrs, elide)
        if op_attrs:
            text += " " + op_attrs
        if op.name != _default_op_name(op):
            text += f" name {json.dumps(op.name)}"
        if op.location:
            text += f" loc {json.dumps(op.location)}"
        lines.append(text)
    declare_consts(fn.outputs)
    outs = ", ".join(_name(v, names) + as_name(i, fn.output_names) for i, v in enumerate(fn.outputs))
    lines.append(f"  return {outs}".rstrip())
    lines.append("}")
    return "\n".join(lines)


def _default_op_name(op: Op) -> str:
    return op.type.split(".")[-1].lower()


def format_module(module: Module, elide: int | None = None) -> str:
    """The text form of a module: its signatures, then its functions in order."""
    parts = [f"signature {json.dumps(key)} = @{name}" for key, name in module.signatures.items()]
    text = "\n".join(parts)
    funcs = "\n\n".join(format_function(fn, elide) for fn in module.functions.values())
    return (text + "\n\n" + funcs if text else funcs) + "\n"


# -- parsing -------------------------------------------------------------------------------


def _eval_literal(text: str, where: str):
    """Evaluate a Python literal that may contain ``array(list, dtype)``, ``nan`` and ``inf``."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise IRParseError(f"{where}: not a literal: {text.strip()[:80]} ({e.msg})") from None

    def ev(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in ("nan", "inf"):
            return float(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(ev(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return {ev(k): ev(v) for k, v in zip(node.keys, node.values)}
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "array"
                and len(node.args) == 2 and isinstance(node.args[1], ast.Name)):
            return np.array(ev(node.args[0]), dtype=np.dtype(node.args[1].id))
        raise IRParseError(f"{where}: unexpected {ast.dump(node)[:80]} in a literal")

    if "<elided" in text:
        raise IRParseError(f"{where}: an elided constant cannot be parsed (print with elide=None)")
    return ev(tree)


class _Line:
    """A cursor over one line of text."""

    def __init__(self, text: str, where: str):
        self.s, self.i, self.where = text, 0, where

    def error(self, what: str) -> IRParseError:
        return IRParseError(f"{self.where}: expected {what} at column {self.i + 1}: {self.s.strip()[:120]}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def peek(self, token: str) -> bool:
        self.ws()
        return self.s.startswith(token, self.i)

    def take(self, token: str) -> bool:
        if self.peek(token):
            self.i += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.take(token):
            raise self.error(f"'{token}'")

    def regex(self, pattern: str, what: str) -> str:
        self.ws()
        m = re.compile(pattern).match(self.s, self.i)
        if not m:
            raise self.error(what)
        self.i = m.end()
        return m.group(0)

    def string(self) -> str:
        self.ws()
        m = re.compile(r'"(?:[^"\\]|\\.)*"').match(self.s, self.i)
        if not m:
            raise self.error("a quoted string")
        self.i = m.end()
        return json.loads(m.group(0))

    def value_name(self) -> str:
        self.expect("%")
        if self.s.startswith('"', self.i):
            return self.string()
        return self.regex(r"[A-Za-z0-9_./\-#]+", "a value name")

    def balanced(self) -> str:
        """The text of one bracketed literal (``{...}``, ``[...]``, ``array(...)``) or a plain token."""
        self.ws()
        start, depth, quote = self.i, 0, None
        while self.i < len(self.s):
            c = self.s[self.i]
            if quote:
                if c == "\\":
                    self.i += 1
                elif c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
                if depth == 0:
                    self.i += 1
                    return self.s[start:self.i]
            elif c == " " and depth == 0:
                break
            self.i += 1
        return self.s[start:self.i]

    def at_end(self) -> bool:
        self.ws()
        return self.i >= len(self.s)


def _parse_type(line: _Line):
    dtype = line.regex(r"[a-z0-9_]+", "a dtype")
    dt = dtype if dtype in _SPECIAL_DTYPES else np.dtype(dtype)
    body = line.regex(r"\[[^\]]*\]", "a shape")[1:-1]
    if body == "*":
        return dt, None
    dims = [] if body == "" else body.split("x")
    return dt, tuple(None if d == "?" else int(d) for d in dims)


class _FunctionParser:
    def __init__(self, fn: Function):
        self.fn, self.env = fn, {}

    def define(self, line: _Line, value_of) -> Value:
        name = line.value_name()
        if name in self.env:
            raise IRParseError(f"{line.where}: %{name} is defined twice")
        line.expect(":")
        dt, shape = _parse_type(line)
        v = value_of(name, dt, shape)
        self.env[name] = v
        return v

    def use(self, line: _Line) -> Value | None:
        if line.take("_"):
            return None
        name = line.value_name()
        if name not in self.env:
            raise IRParseError(f"{line.where}: %{name} is used before it is defined")
        return self.env[name]


def _parse_op_line(p: _FunctionParser, line: _Line) -> None:
    fn = p.fn
    decls = []
    if not line.take("()"):
        while True:
            name = line.value_name()
            line.expect(":")
            decls.append((name, *_parse_type(line)))
            if not line.take(","):
                break
    line.expect("=")
    if line.take("const"):
        if len(decls) != 1:
            raise IRParseError(f"{line.where}: a constant defines one value")
        name, dt, shape = decls[0]
        array = _eval_literal(line.balanced(), line.where)
        array = np.asarray(array, dtype=None if isinstance(dt, str) else dt)
        if shape is not None and tuple(array.shape) != shape:
            array = array.reshape(shape)
        quant = None
        if line.take("quant"):
            q = json.loads(line.balanced())
            quant = Quantization(tuple(q["scale"]), tuple(q["zero_point"]), q.get("axis", 0))
        v = Value(name, array.dtype, tuple(array.shape), const=array, quant=quant)
        fn._names.add(name)
        p.env[name] = v
        return
    op_type = line.regex(r"[A-Za-z_]+\.[A-Za-z0-9_]+", "an op type such as tfl.ADD")
    line.expect("(")
    inputs = []
    if not line.take(")"):
        while True:
            inputs.append(p.use(line))
            if line.take(")"):
                break
            line.expect(",")
    attrs, name, loc = {}, None, None
    if line.peek("{"):
        attrs = _eval_literal(line.balanced(), line.where)
    if line.take("name"):
        name = line.string()
    if line.take("loc"):
        loc = line.string()
    if not line.at_end():
        raise line.error("the end of the line")
    op = fn.add_op(op_type, inputs, [], attrs, name=name or "", location=loc)
    if name is None:
        op.name = _default_op_name(op)
    for i, (vname, dt, shape) in enumerate(decls):
        if vname in p.env:
            raise IRParseError(f"{line.where}: %{vname} is defined twice")
        v = Value(vname, dt, shape, producer=op, index=i)
        fn._names.add(vname)
        op.outputs.append(v)
        p.env[vname] = v


def _parse_function(lines: list[tuple[int, str]], pos: int) -> tuple[Function, int]:
    n, header = lines[pos]
    line = _Line(header, f"line {n}")
    line.expect("func")
    line.expect("@")
    fn = Function(line.regex(r"[^\s(]+", "a function name"))
    p = _FunctionParser(fn)
    line.expect("(")
    if not line.take(")"):
        while True:
            p.define(line, lambda name, dt, shape: fn.add_input(name, dt, shape))
            fn.input_names.append(line.string() if line.take("as") else "")
            if line.take(")"):
                break
            line.expect(",")
    if line.take("attributes"):
        fn.attrs = _eval_literal(line.balanced(), line.where)
    line.expect("{")
    if not any(fn.input_names):
        fn.input_names = []
    pos += 1
    while pos < len(lines):
        n, text = lines[pos]
        line = _Line(text, f"line {n}")
        if text.strip() == "}":
            break
        if line.take("return"):
            outs, names = [], []
            while not line.at_end():
                outs.append(p.use(line))
                names.append(line.string() if line.take("as") else "")
                if not line.take(","):
                    break
            if not line.at_end():
                raise line.error("the end of the line")
            fn.outputs = outs
            fn.output_names = names if any(names) else []
            if pos + 1 >= len(lines) or lines[pos + 1][1].strip() != "}":
                raise IRParseError(f"line {n}: expected '}}' after return")
            return fn, pos + 2
        _parse_op_line(p, line)
        pos += 1
    raise IRParseError(f"function @{fn.name}: no 'return' line")


def parse_module(text: str) -> Module:
    """Read the text form back into a :class:`Module` (raises :class:`IRParseError`)."""
    lines = [(i + 1, raw.rstrip()) for i, raw in enumerate(text.splitlines())
             if raw.strip() and not raw.strip().startswith("#")]
    module, pos = Module(), 0
    while pos < len(lines):
        n, raw = lines[pos]
        if raw.startswith("signature"):
            line = _Line(raw, f"line {n}")
            line.expect("signature")
            key = line.string()
            line.expect("=")
            line.expect("@")
            module.signatures[key] = line.regex(r"\S+", "a function name")
            pos += 1
        elif raw.startswith("func"):
            fn, pos = _parse_function(lines, pos)
            if fn.name in module.functions:
                raise IRParseError(f"line {n}: function @{fn.name} is defined twice")
            module.add(fn)
        else:
            raise IRParseError(f"line {n}: expected 'signature' or 'func': {raw.strip()[:80]}")
    return module


def parse_function(text: str) -> Function:
    """Read one function's text form (a module text holding exactly one function)."""
    module = parse_module(text)
    if len(module.functions) != 1:
        raise IRParseError(f"expected one function, found {len(module.functions)}")
    return next(iter(module.functions.values()))
