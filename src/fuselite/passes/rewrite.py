"""Declared peephole rewrites: a rule is a pattern, an optional condition and a replacement.

A *pattern* is a small tree of ops written the way the expression reads, with named
captures; ``TFL.ADD(x, y)`` is ``OpPattern("tfl.ADD", x, y)``::

    PAD = TFL.PAD(Var("x"), Const("pads"), name="pad", single_use=True)

    @rule("pad_into_conv", TFL["CONV_2D", "DEPTHWISE_CONV_2D"](PAD, Const("w"), ..., name="conv"),
          condition=_pads_as_same)
    def fold_same_pad_into_conv(ctx: RewriteCtx, m: Match) -> None:
        # the docstring's first line says what the rule does
        m.conv.inputs[0] = m.x
        m.conv.attrs["padding"] = "SAME"
        ctx.remove(m.pad)

* :class:`Var` matches any value (``Var("x")`` twice in one pattern: the same value),
  :class:`Const` a constant (``Const(value=0.5)``: a scalar close to 0.5),
  :class:`OpPattern` a value computed by an op of one of the given types whose operands match
  the sub-patterns (``...`` as the last operand: more operands may follow;
  ``commutative``: two operands in either order; ``single_use``: its result has exactly
  one consuming op), :class:`OneOf` the first alternative that matches. Other nodes
  subclass :class:`Pattern`.
* The *condition* ``(ctx, m) -> bool`` looks at the captures ``m`` (``m.x``, ``m.layer``)
  once the pattern matched; the *replacement* ``(ctx, m)`` rewrites the function through
  :class:`RewriteCtx` (build new ops, modify the matched ones, drop them).
* Rules are registered in :data:`RULES` under a rule-set name and applied by
  :func:`rewrite`, which visits the function's ops in program order and tries, on each
  op, the rules whose *anchor* (the root of the pattern unless ``anchor=`` names another
  op of it) has that type. From an anchor below the root, the match climbs to the root
  through the consumers of each op on the way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from fuselite.ir import Function, Op, Value


class Match(dict):
    """What a pattern captured, by name: ``m.x`` is ``m["x"]`` (a :class:`Value` or an op)."""

    def __getattr__(self, name: str):
        if name in self:
            return self[name]
        raise AttributeError(name)

    def bind(self, name: str | None, thing) -> bool:
        """Capture ``thing`` as ``name``; a name captured before must be the same thing."""
        if name is None:
            return True
        bound = self.get(name)
        if bound is None:
            self[name] = thing
            return True
        return bound is thing


_NO_USERS: list = []  # never modified


def _rollback(m: Match, size: int) -> None:
    """Forget the captures made after ``m`` had ``size`` of them (dicts keep insertion order)."""
    while len(m) > size:
        m.popitem()


class RewriteCtx:
    """The function being rewritten, as rules see it: users, outputs, and mutation helpers.

    ``keep`` holds the uids of values that must stay as they are (the function's outputs,
    as the caller knew them when it started).
    """

    def __init__(self, fn: Function, keep: Collection[int] = frozenset()):
        self.fn = fn
        self.keep = keep
        self._users: dict[int, list[Op]] | None = None
        self._ops: set[int] | None = None

    # -- queries ---------------------------------------------------------------
    def users_of(self, v: Value) -> list[Op]:
        """The ops consuming ``v`` (one entry per operand that reads it)."""
        if self._users is None:
            self._users = self.fn.users()
        return self._users.get(v.uid, _NO_USERS)

    def contains(self, op: Op) -> bool:
        """True if ``op`` is one of the function's ops (and not, say, a folded-away producer)."""
        if self._ops is None:
            self._ops = {id(o) for o in self.fn.ops}
        return id(op) in self._ops

    def is_output(self, v: Value) -> bool:
        """True if ``v`` is one of the values to keep (see above)."""
        return v.uid in self.keep

    # -- mutations ---------------------------------------------------------------
    def const(self, array, name: str) -> Value:
        return self.fn.const(array, name)

    def replace(self, op: Op, value: Value) -> None:
        """Drop ``op``; whatever read its result reads ``value`` instead."""
        self.fn.replace_uses(op.outputs[0], value)
        self.fn.ops.remove(op)

    def remove(self, op: Op) -> None:
        """Drop ``op``, whose result nothing reads any more."""
        self.fn.ops.remove(op)

    def insert_before(self, anchor: Op, op: Op) -> None:
        """Place the new ``op`` (from ``fn.make_op``) just before ``anchor``."""
        self.fn.ops.insert(self.fn.ops.index(anchor), op)

    def changed(self) -> None:
        """Forget the cached users and op set (the driver calls this after each rewrite)."""
        self._users = self._ops = None


class Pattern:
    """A node of a pattern tree; :meth:`match` leaves ``m`` as it was when it returns False."""

    name: str | None = None

    def match(self, v: Value | None, m: Match, ctx: RewriteCtx) -> bool:
        raise NotImplementedError

    def children(self) -> Sequence[Pattern]:
        """Sub-patterns an anchor may sit in (the way from an anchor up to the root)."""
        return ()

    # Nodes that can be climbed to from an anchor below them implement these two.
    def consumers(self, v: Value, ctx: RewriteCtx) -> Iterable[Op]:
        """Ops reading ``v`` that this node might match, in the order to try them."""
        raise TypeError(f"{type(self).__name__} cannot be above a rule's anchor")

    def match_op(self, op: Op, m: Match, ctx: RewriteCtx, fixed: tuple | None = None) -> bool:
        """Match ``op`` itself; ``fixed`` = (sub-pattern, value) already matched below."""
        raise TypeError(f"{type(self).__name__} cannot be a rule's anchor or above it")


class Var(Pattern):
    """Any value (not a missing optional operand); with a name, captured as that name.

    The same name twice in one pattern must be the same value: ``x * relu6(x + 3)``.
    """

    def __init__(self, name: str | None = None):
        self.name = name

    def match(self, v, m, ctx) -> bool:
        return v is not None and m.bind(self.name, v)

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


class Const(Var):
    """A constant value; with ``value``, a one-element constant within ``tol`` of it."""

    def __init__(self, name: str | None = None, value: float | None = None, tol: float = 1e-6):
        super().__init__(name)
        self.value, self.tol = value, tol

    def match(self, v, m, ctx) -> bool:
        if v is None or not v.is_const:
            return False
        if self.value is not None and not (v.const.size == 1 and abs(float(v.const.reshape(())) - self.value) < self.tol):
            return False
        return m.bind(self.name, v)

    def __repr__(self) -> str:
        return f"Const({self.name!r}, value={self.value})"


_SWAPPED = ((0, 1), (1, 0))  # the operand orders tried for a commutative op


class OpPattern(Pattern):
    """A value computed by an op of ``types`` (dialect-qualified) whose operands match ``inputs``.

    ``OpPattern(("tfl.CONV_2D", "tfl.DEPTHWISE_CONV_2D"), Var("x"), Const("w"), ..., name="conv")``
    matches a convolution of anything by constant weights, with or without a bias, and
    captures the op as ``conv``. Options:

    * ``...`` as the last operand: the op may have more operands than the patterns given;
      otherwise it has exactly as many;
    * ``commutative``: two operands, in either order (``True``, or the op kinds for which it
      holds, e.g. ``("ADD", "MUL")`` when the types also include ``SUB``);
    * ``single_use``: the op's result has exactly one consuming op;
    * ``where``: a check of the op alone (its attributes, its shapes), made before its
      operands are looked at: ``where=lambda op: op.attrs.get("padding") == "VALID"``.
    """

    def __init__(self, types: str | Collection[str], *inputs, name: str | None = None,
                 commutative: bool | Collection[str] = False, single_use: bool = False,
                 where: Callable[[Op], bool] | None = None):
        self.types = frozenset((types,) if isinstance(types, str) else types)
        self.open = bool(inputs) and inputs[-1] is Ellipsis
        self.inputs: tuple[Pattern, ...] = inputs[:-1] if self.open else inputs
        self.name, self.single_use, self.where = name, single_use, where
        kinds = None if isinstance(commutative, bool) else set(commutative)
        self.commutative = frozenset(t for t in self.types if commutative is True or
                                     (kinds is not None and t.split(".", 1)[1] in kinds))
        if self.commutative and len(self.inputs) != 2:
            raise ValueError(f"commutative {sorted(self.types)} needs exactly two operand patterns")
        self._in_order = (tuple(range(len(self.inputs))),)

    def match(self, v, m, ctx) -> bool:
        op = None if v is None else v.producer
        return op is not None and op.type in self.types and ctx.contains(op) and self.match_op(op, m, ctx)

    def match_op(self, op, m, ctx, fixed=None) -> bool:
        n = len(self.inputs)
        if op.type not in self.types or len(op.inputs) < n or (len(op.inputs) > n and not self.open):
            return False
        if self.where is not None and not self.where(op):
            return False
        if self.single_use and len(ctx.users_of(op.outputs[0])) != 1:
            return False
        size = len(m)
        if not m.bind(self.name, op):
            return False
        bound = len(m)
        for order in _SWAPPED if op.type in self.commutative else self._in_order:
            if self._operands_match(op.inputs, order, m, ctx, fixed):
                return True
            _rollback(m, bound)
        _rollback(m, size)
        return False

    def _operands_match(self, inputs, order, m, ctx, fixed) -> bool:
        for p, i in zip(self.inputs, order):
            if fixed is not None and p is fixed[0]:  # matched below, on the way up from the anchor
                if inputs[i] is not fixed[1]:
                    return False
            elif not p.match(inputs[i], m, ctx):
                return False
        return True

    def consumers(self, v, ctx) -> Iterable[Op]:
        return [u for u in ctx.users_of(v) if u.type in self.types]

    def children(self) -> Sequence[Pattern]:
        return self.inputs

    def __repr__(self) -> str:
        kinds = "|".join(sorted(self.types))
        return f"{kinds}({', '.join(map(repr, self.inputs))}{', ...' if self.open else ''})"


class OneOf(Pattern):
    """The first of ``alternatives`` that matches: ``OneOf(TF.Mul(x, c), TF.RealDiv(x, d))``."""

    def __init__(self, *alternatives: Pattern):
        self.alternatives = alternatives

    def match(self, v, m, ctx) -> bool:
        return any(p.match(v, m, ctx) for p in self.alternatives)

    def __repr__(self) -> str:
        return f"OneOf({', '.join(map(repr, self.alternatives))})"


class Dialect:
    """Pattern constructors by op kind: ``TFL.ADD(x, y)``; ``TFL["ADD", "SUB"](x, y)`` for several."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def __getattr__(self, kind: str) -> Callable[..., OpPattern]:
        if kind.startswith("_"):
            raise AttributeError(kind)
        return functools.partial(OpPattern, f"{self.prefix}.{kind}")

    def __getitem__(self, kinds: str | tuple[str, ...]) -> Callable[..., OpPattern]:
        kinds = (kinds,) if isinstance(kinds, str) else kinds
        return functools.partial(OpPattern, tuple(f"{self.prefix}.{k}" for k in kinds))


TF = Dialect("tf")
TFL = Dialect("tfl")

Condition = Callable[[RewriteCtx, Match], bool]
Replacement = Callable[[RewriteCtx, Match], None]


@dataclass
class Rule:
    """A pattern, an optional condition on its captures, and the replacement to apply.

    ``anchor`` names the op of the pattern the driver visits (default: the root).
    """

    pattern: OpPattern
    replacement: Replacement
    condition: Condition | None = None
    anchor: str | None = None
    name: str = ""
    path: list[Pattern] = field(init=False, repr=False)  # the anchor's node, then those above it
    above: frozenset[str] | None = field(init=False, repr=False)

    def __post_init__(self):
        path = _path_to(self.pattern, self.anchor) if self.anchor else [self.pattern]
        if path is None or not isinstance(path[-1], OpPattern):
            raise ValueError(f"rule {self.name or self.replacement.__name__}: no op named {self.anchor!r}")
        self.path = path[::-1]
        self.name = self.name or self.replacement.__name__
        above = self.path[1] if len(self.path) > 1 else None
        self.above = above.types if isinstance(above, OpPattern) else None  # the types that may read the anchor

    @property
    def anchor_types(self) -> frozenset[str]:
        return self.path[0].types

    @property
    def doc(self) -> str:
        return (self.replacement.__doc__ or "").strip().split("\n")[0]

    def match(self, op: Op, ctx: RewriteCtx) -> Match | None:
        """The captures if the pattern matches with its anchor at ``op`` (condition not checked)."""
        if self.above is not None and not _feeds(op, self.above, ctx):
            return None  # quick no: nothing reading the anchor's result could match the node above it
        m = Match()
        return m if self.path[0].match_op(op, m, ctx) and _climb(self.path, 1, op, m, ctx) else None

    def apply(self, op: Op, ctx: RewriteCtx) -> bool:
        """Rewrite at ``op`` if the pattern matches there and the condition holds."""
        m = self.match(op, ctx)
        if m is None or (self.condition is not None and not self.condition(ctx, m)):
            return False
        self.replacement(ctx, m)
        return True


def _feeds(op: Op, types: Collection[str], ctx: RewriteCtx) -> bool:
    """True if an op of one of ``types`` reads ``op``'s result."""
    for user in ctx.users_of(op.outputs[0]):
        if user.type in types:
            return True
    return False


def _path_to(node: Pattern, name: str) -> list[Pattern] | None:
    """The nodes from ``node`` down to the op pattern named ``name``."""
    if isinstance(node, OpPattern) and node.name == name:
        return [node]
    for child in node.children():
        below = _path_to(child, name)
        if below is not None:
            return [node, *below]
    return None


def _climb(path: list[Pattern], i: int, below: Op, m: Match, ctx: RewriteCtx) -> bool:
    """Match ``path[i:]`` upwards from ``below``, the op ``path[i - 1]`` matched; backtracks."""
    if i == len(path):
        return True
    node, v, size = path[i], below.outputs[0], len(m)
    for op in node.consumers(v, ctx):
        if node.match_op(op, m, ctx, fixed=(path[i - 1], v)) and _climb(path, i + 1, op, m, ctx):
            return True
        _rollback(m, size)
    return False


RULES: dict[str, list[Rule]] = {}  # rule set -> its rules, in the order they are tried
_BY_TYPE: dict[str, dict[str, _Candidates]] = {}  # rule set -> anchor op type -> rules


def rule(rule_set: str, pattern: OpPattern, *, anchor: str | None = None, condition: Condition | None = None):
    """Register the decorated replacement, with ``pattern`` and ``condition``, in ``rule_set``.

    Example (``Var``, ``Const`` and ``TFL`` from this module)::

        @rule("drop_noops", TFL.TRANSPOSE(Var("x"), Const("perm"), name="op"),
              condition=lambda ctx, m: list(m.perm.const) == list(range(m.perm.const.size)))
        def drop_identity_transpose(ctx, m):
            \"\"\"TRANSPOSE by the identity permutation goes.\"\"\"
            ctx.replace(m.op, m.x)
    """

    def register(replacement: Replacement) -> Replacement:
        RULES.setdefault(rule_set, []).append(Rule(pattern, replacement, condition, anchor))
        _BY_TYPE[rule_set] = _index(RULES[rule_set])
        return replacement

    return register


@dataclass
class _Candidates:
    """The rules anchored at one op type; ``above``: what must read the op for any to match."""

    rules: list[Rule]
    above: frozenset[str] | None = None


def _index(rules: Iterable[Rule]) -> dict[str, _Candidates]:
    by_type: dict[str, list[Rule]] = {}
    for r in rules:
        for t in sorted(r.anchor_types):
            by_type.setdefault(t, []).append(r)
    return {t: _Candidates(rs, None if any(r.above is None for r in rs) else frozenset().union(*(r.above for r in rs)))
            for t, rs in by_type.items()}


def rewrite(fn: Function, rules: str | Iterable[Rule], *, keep: Collection[int] = frozenset(),
            first_only: bool = False) -> int:
    """Apply ``rules`` (a rule set's name, or rules) to ``fn``; returns how many rewrites were made.

    One walk over the ops in program order (over the ops there were when it started, so
    not over those the rewrites create): on each op, the rules anchored at its type are
    tried in order and the first whose pattern matches and whose condition holds is
    applied. ``first_only`` stops at the first rewrite; either way the caller repeats the
    walk (with other passes in between) until nothing changes. ``keep``: see
    :class:`RewriteCtx`.

    Example::

        while rewrite(fn, "fold_into_weighted", keep={v.uid for v in fn.outputs}, first_only=True):
            pass
    """
    if isinstance(rules, str):
        if rules not in _BY_TYPE:
            raise ValueError(f"no rule set named {rules!r} (known: {', '.join(sorted(RULES))})")
        by_type = _BY_TYPE[rules]
    else:
        by_type = _index(rules)
    ctx = RewriteCtx(fn, keep)
    count = 0
    for op in fn.ops if first_only else list(fn.ops):
        candidates = by_type.get(op.type)
        if candidates is None or (count and not ctx.contains(op)):  # an earlier rewrite removed it
            continue
        if candidates.above is not None and not _feeds(op, candidates.above, ctx):
            continue
        for r in candidates.rules:
            if r.apply(op, ctx):
                count += 1
                ctx.changed()
                break
        if first_only and count:
            break
    return count

