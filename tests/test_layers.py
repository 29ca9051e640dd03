"""Layering: a module of ``fuselite`` imports only from its own unit and from lower layers; no module
imports itself through others (no circle), and none imports another module's private (underscore) names.

Every module under ``src/fuselite`` is parsed with ``ast`` (nothing is imported or run), and
every import in it counts, also those inside functions. A *unit* is what follows ``fuselite.``:
a subpackage (``passes``) or a top-level module (``errors``). Units in :data:`LAYERS` may
import their own modules and units of lower layers, not units of their own layer or above.
Every unit not in the table (``converter``, ``cli``, ``demo``, ``report``, ``testing``,
``examples``, the ``fuselite`` package itself, and any new top-level module) is the top layer:
it may import anything, and nothing in the table may import it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "fuselite"

# Lowest first. Units of one layer are independent of each other.
LAYERS: list[set[str]] = [
    {"errors", "budget"},  # the exceptions every layer raises; the error budget's plan (no imports)
    {"ir", "tf_dtypes", "operands", "ops", "paths"},  # the graph IR; TensorFlow dtypes <-> IR dtypes; LiteRT operand
    # layouts; what each op's quantized kernels take (ops/catalog.py); the paths a run may write, written atomically
    {"tflite", "lower", "passes", "quantize", "runtime"},  # stages on the IR, each standing alone; running .tflite
    {"fusion", "targets"},  # composite rules: build on passes (cleanup) and tflite (custom-op options); targets
    {"rnn"},  # the recurrent package: its rules are fusion rules; its loop matcher folds with passes
    {"frontend"},  # TF / Keras -> IR: marks Keras RNN functions with fusion's `implements` and rnn's gate orders
    {"stages"},  # the pass bodies by concern, on everything below; pipeline.py (top) declares their order
]
TOP = len(LAYERS)


def layer_of(unit: str) -> int:
    """The index of ``unit``'s layer in :data:`LAYERS`, or :data:`TOP` if it is not declared."""
    return next((i for i, units in enumerate(LAYERS) if unit in units), TOP)


def unit_of(module: str) -> str:
    """``"fuselite.passes.shapes"`` -> ``"passes"``; the package itself is its own unit."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def imported_modules(module: str, source: str, is_package: bool, known: set[str]) -> list[tuple[int, str]]:
    """``(line, module)`` for every ``fuselite`` import in ``source``, wherever it is written.

    ``from A import b`` counts as an import of ``A.b`` when that is a module, else of ``A``.
    """
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((node.lineno, sub if sub in known else base))
    return [(line, target) for line, target in out if target == PACKAGE or target.startswith(PACKAGE + ".")]


def layer_violations(module: str, source: str, is_package: bool = False, known: set[str] = frozenset()) -> list[str]:
    """What ``module`` imports against the layer table, one sentence per import."""
    unit = unit_of(module)
    mine = layer_of(unit)
    problems = []
    for line, target in imported_modules(module, source, is_package, set(known)):
        other = unit_of(target)
        theirs = layer_of(other)
        if other == unit or mine == TOP or theirs < mine:
            continue
        allowed = sorted(u for units in LAYERS[:mine] for u in units)
        where = "the top layer" if theirs == TOP else f"layer {theirs}" + (" (the same)" if theirs == mine else "")
        problems.append(
            f"{module} (line {line}) imports {target}: '{unit}' is in layer {mine}, '{other}' in {where}; "
            f"'{unit}' may import only its own modules" + (f" and {', '.join(allowed)}" if allowed else "")
        )
    return problems


def test_every_import_goes_down_the_layers():
    modules = all_modules()
    known = set(modules)
    problems = []
    for name, path in modules.items():
        problems += layer_violations(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", known)
    assert not problems, "imports against the layer table in tests/test_layers.py:\n" + "\n".join(problems)


def test_the_layer_table_names_existing_units_once():
    units = {unit_of(m) for m in all_modules()}
    declared = [u for layer in LAYERS for u in layer]
    assert len(declared) == len(set(declared)), "a unit is in two layers"
    assert set(declared) <= units, f"layer table names units that do not exist: {sorted(set(declared) - units)}"


KNOWN = {"fuselite", "fuselite.frontend", "fuselite.frontend.tf_graph", "fuselite.passes", "fuselite.passes.shapes",
         "fuselite.ir", "fuselite.lower", "fuselite.lower.registry", "fuselite.converter", "fuselite.errors"}


@pytest.mark.parametrize(
    ("module", "source", "offender"),
    [
        ("fuselite.passes.shapes", "def f():\n    from fuselite.frontend.tf_graph import tf_dtype_for\n",
         "fuselite.passes.shapes (line 2) imports fuselite.frontend.tf_graph"),
        ("fuselite.passes.shapes", "from fuselite.lower.registry import LOWERINGS\n",
         "fuselite.passes.shapes (line 1) imports fuselite.lower.registry"),  # same layer
        ("fuselite.ir", "import fuselite.converter\n", "fuselite.ir (line 1) imports fuselite.converter"),
        ("fuselite.errors", "from fuselite import ir\n", "fuselite.errors (line 1) imports fuselite.ir"),
        ("fuselite.passes.shapes", "from .. import frontend\n", "fuselite.passes.shapes (line 1) imports fuselite.frontend"),
        ("fuselite.ir", "from fuselite import Converter\n", "fuselite.ir (line 1) imports fuselite:"),
    ],
)
def test_an_upward_import_is_named(module, source, offender):
    problems = layer_violations(module, source, known=KNOWN)
    assert len(problems) == 1 and problems[0].startswith(offender), problems


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("fuselite.passes.shapes", "from fuselite.ir import Function\nfrom fuselite.passes import dce\n"),
        ("fuselite.passes.shapes", "from . import dce\nfrom ..errors import ConversionError\nimport numpy\n"),
        ("fuselite.converter", "from fuselite.frontend import tf_graph\nimport fuselite.report\n"),
        ("fuselite", "from fuselite.converter import Converter\n"),
    ],
)
def test_allowed_imports_pass(module, source):
    assert layer_violations(module, source, is_package=module == "fuselite", known=KNOWN) == []


# -- no circles, no private names across modules ----------------------------------------------------------


def import_graph(sources: dict[str, str], packages: set[str]) -> dict[str, set[str]]:
    """module -> the ``fuselite`` modules it imports (anywhere in it), for ``sources`` (module -> text). The
    edges between a package's ``__init__`` and its own modules count too: an ``__init__`` that imports its
    modules, one of which imports a name back from the package, is a circle (a package's ``__init__`` only
    hands names on from its modules)."""
    known = set(sources)
    return {name: {t for _, t in imported_modules(name, text, name in packages, known) if t in known and t != name}
            for name, text in sources.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (each one circle or more), found by Tarjan's
    algorithm, each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def private_imports(module: str, source: str, is_package: bool, known: set[str]) -> list[str]:
    """Each private name ``module`` takes from another ``fuselite`` module: ``from fuselite.x import _y`` (also
    under an alias) or ``x._y`` on a module imported as ``x``."""
    tree = ast.parse(source)
    problems, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(PACKAGE):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in known:
                    aliases[alias.asname or alias.name] = full
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    problems.append(f"{module} (line {node.lineno}) imports {alias.name} from {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases and \
                node.attr.startswith("_") and not node.attr.startswith("__") and aliases[node.value.id] != module:
            problems.append(f"{module} (line {node.lineno}) uses {node.attr} of {aliases[node.value.id]}")
    return problems


def test_no_import_circles():
    modules = all_modules()
    sources = {name: path.read_text(encoding="utf-8") for name, path in modules.items()}
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    circles = import_circles(import_graph(sources, packages))
    assert not circles, "modules that import each other (also through others, also inside functions):\n" + \
        "\n".join(" <-> ".join(c) for c in circles)


def test_no_private_name_is_imported_across_modules():
    modules = all_modules()
    problems = []
    for name, path in modules.items():
        problems += private_imports(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", set(modules))
    assert not problems, "private names used across modules (make them public, or keep them home):\n" + \
        "\n".join(problems)


def test_a_circle_is_found_through_a_third_module_and_a_function_level_import():
    sources = {"fuselite.a": "from fuselite.b import f\n", "fuselite.b": "def f():\n    from fuselite.c import g\n",
               "fuselite.c": "import fuselite.a\n", "fuselite.d": "from fuselite.a import x\n",
               "fuselite.p": "from fuselite.p import q\n", "fuselite.p.q": "from fuselite.p import r\n",
               "fuselite.p.r": ""}
    assert import_circles(import_graph(sources, {"fuselite.p"})) == [["fuselite.a", "fuselite.b", "fuselite.c"]]


def test_a_module_taking_a_name_back_from_its_package_is_a_circle():
    """runtime/__init__.py held functions its own modules imported back (runtime <-> runtime.calibrate)."""
    sources = {"fuselite.p": "from fuselite.p.q import f\ndef g():\n    pass\n",
               "fuselite.p.q": "def f():\n    from fuselite.p import g\n"}
    assert import_circles(import_graph(sources, {"fuselite.p"})) == [["fuselite.p", "fuselite.p.q"]]


@pytest.mark.parametrize(("source", "found"), [
    ("from fuselite.passes.fold_tf import _evaluate\n", ["imports _evaluate from fuselite.passes.fold_tf"]),
    ("from fuselite.passes import fold_tf\nfold_tf._evaluate([])\n", ["uses _evaluate of fuselite.passes.fold_tf"]),
    ("import fuselite.passes.fold_tf as ft\nft._evaluate([])\n", ["uses _evaluate of fuselite.passes.fold_tf"]),
    ("from fuselite.passes.fold_tf import evaluate_ops\nfrom fuselite import __version__\n", []),
])
def test_a_private_import_is_named(source, found):
    known = {"fuselite", "fuselite.passes", "fuselite.passes.fold_tf"}
    problems = private_imports("fuselite.rnn.sources.loops", source, False, known)
    assert [p.split(") ", 1)[1] for p in problems] == found, problems
