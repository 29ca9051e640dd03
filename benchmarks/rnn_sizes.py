#!/usr/bin/env python
"""The recurrent forms over a grid of layer sizes, against the official converter's model (issue 48).

One recurrent layer per point: LSTM, GRU or SimpleRNN, plain or ``Bidirectional``, Keras 3 or tf-keras, over
``units`` {16, 64, 256}, ``steps`` {8, 50, 200}, ``features`` {8, 64}, ``batch`` {1, 4}, the sequence or the last
step as output (864 points). Each point is converted by fuselite in each form (``rnn_form="fused"`` where the
family has a LiteRT op, ``"unrolled"``, ``"loop"``) and by the official converter (tf-keras: its
``from_keras_model``, the fused ops where it writes them; Keras 3: a concrete function, WHILE loops, its
``from_keras_model`` fails on Keras 3 RNNs), with the batch static in every model; then timed on LiteRT at each
thread count, all sides and a second instance of the official model (*A/A*, the noise floor) interleaved in fresh
interpreters per block, ratios to the official model per block, the median.

The full grid takes hours here; by default a seeded sample (``--sample N``): the points are drawn stratum by
stratum (family x direction x flavour, 12 strata), each stratum's size points (units x steps x features x batch x
output, 72) in a seeded random order, N / 12 from each, so that every family, direction and flavour is measured
equally and every size value appears. ``--points`` lists points by key to rerun them. The raw measurements go to
``--results FILE.json`` (the cost model in ``rnn/forms/policy.py`` is read from them), rewritten after each point,
so that a run stopped midway keeps what it measured (``--from-results`` renders it). Example::

    .venv/bin/python benchmarks/rnn_sizes.py --threads 1 2 --results rnn-sizes.json --out docs/rnn-sizes.md

On a machine without TensorFlow (an idle many-core one), convert here with ``--export DIR`` and time there::

    python benchmarks/rnn_sizes.py --time DIR --threads 1 2 4 --results rnn-sizes-4.json --out rnn-sizes-4.md
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

FAMILIES = ("LSTM", "GRU", "SimpleRNN")
DIRECTIONS = ("plain", "bidirectional")
FLAVOURS = ("keras3", "tf_keras")
SIZES = {"units": (16, 64, 256), "steps": (8, 50, 200), "features": (8, 64), "batch": (1, 4),
         "output": ("sequence", "last")}
FORMS = ("fused", "unrolled", "loop")


def key(p: dict) -> str:
    return (f"{p['flavour']}.{p['family']}.{p['direction']}.u{p['units']}.t{p['steps']}.f{p['features']}."
            f"b{p['batch']}.{p['output']}")


def grid() -> list[dict]:
    points = []
    for family, direction, flavour in itertools.product(FAMILIES, DIRECTIONS, FLAVOURS):
        for sizes in itertools.product(*SIZES.values()):
            points.append({"family": family, "direction": direction, "flavour": flavour,
                           **dict(zip(SIZES, sizes))})
    return points


def sample(points: list[dict], n: int, seed: int = 0) -> list[dict]:
    """``n`` points, ``n / 12`` from each stratum (family x direction x flavour) in a seeded random order."""
    strata: dict[tuple, list[dict]] = {}
    for p in points:
        strata.setdefault((p["family"], p["direction"], p["flavour"]), []).append(p)
    rng = np.random.default_rng(seed)
    per = max(1, n // len(strata))
    chosen = []
    for members in strata.values():
        chosen += [members[i] for i in rng.permutation(len(members))[:per]]
    return chosen


def forms_of(p: dict) -> tuple[str, ...]:
    return FORMS[1:] if p["family"] == "GRU" else FORMS  # LiteRT has no GRU op: its "fused" is the unrolled form


def default_form(p: dict, threads: int, compiled: bool = False) -> str:
    """The form ``rnn_form="default"`` gives the point's layer at ``threads`` (``rnn/forms/policy.py``): by its
    size where the policy chooses so, as ``from_keras_model`` sees the layer (a Bidirectional of either flavour:
    one layer of two directions; the batch static); tests/test_rnn_forms.py checks it against conversions.
    The grid times the forms on the Interpreter: ``litert_api="interpreter"``'s defaults; ``compiled``: the
    default's (``litert_api="any"``: no fused form, the file loads in CompiledModel too)."""
    from fuselite.rnn.forms.policy import form_key, rnn_forms, sized_form

    forms = rnn_forms("default", False, threads=threads, compiled=compiled)
    sized = sized_form(forms, size_of(p))
    form = sized[0] if sized else forms[form_key(forms, p["family"], "tf_keras" if p["flavour"] == "tf_keras"
                                                 else "keras")]
    return "unrolled" if form == "fused" and p["family"] == "GRU" else form


def build(p: dict):
    from cases import keras_module

    k = keras_module(p["flavour"])
    k.utils.set_random_seed(0)
    inputs = k.Input(batch_shape=(p["batch"], p["steps"], p["features"]))
    layer = getattr(k.layers, p["family"])(p["units"], return_sequences=p["output"] == "sequence")
    if p["direction"] == "bidirectional":
        layer = k.layers.Bidirectional(layer)
    return k.Model(inputs, layer(inputs))


def convert(p: dict, silence: bool) -> tuple[dict, list[np.ndarray], list[str]]:
    """{side: bytes} (each form, "tf", "tf_twin") and the inputs of one point (needs TensorFlow)."""
    import tensorflow as tf
    from measure import quiet

    import fuselite

    with quiet(silence):
        model = build(p)
        x = np.random.default_rng(1).standard_normal((p["batch"], p["steps"], p["features"])).astype(np.float32)
        datas = {form: fuselite.Converter.from_keras_model(model, rnn_form=form).convert() for form in forms_of(p)}
        if p["flavour"] == "tf_keras":
            datas["tf"] = tf.lite.TFLiteConverter.from_keras_model(model).convert()
        else:
            spec = tf.TensorSpec([p["batch"], p["steps"], p["features"]], tf.float32)
            cf = tf.function(lambda t: model(t, training=False)).get_concrete_function(spec)
            datas["tf"] = tf.lite.TFLiteConverter.from_concrete_functions([cf]).convert()
    datas["tf_twin"] = bytes(bytearray(datas["tf"]))
    return datas, [x], [model.inputs[0].name]


def measure(p: dict, datas: dict, inputs, names, settings) -> dict:
    from measure import blockwise_latency
    from results import Side
    from rnn_forms import official_form

    sides = [s for s in (*forms_of(p), "tf", "tf_twin")]
    blocks = blockwise_latency([Side(data=datas[s]) for s in sides], inputs, names, settings)
    tf = sides.index("tf")
    return {"point": p, "threads": settings.threads, "official": official_form(datas["tf"]),
            "us": {s: statistics.median(b[n] for b in blocks) for n, s in enumerate(sides)},
            "ratios": {s: statistics.median(b[n] / b[tf] for b in blocks) for n, s in enumerate(sides)},
            "sizes": {s: len(datas[s]) for s in sides}, "default": default_form(p, settings.threads)}


def summary(results: list[dict], threads: int, label: str = "") -> list[str]:
    """The default form's scores at ``threads`` (``label``: which points), and the points where it is slower than
    the official model, beside their A/A."""
    from fuselite.rnn.forms.policy import MAX_STEP_WEIGHTS

    rows = [r for r in results if r["threads"] == threads]
    if not rows:
        return []
    slower = [r for r in rows if r["ratios"][r["default"]] > 1.0]
    beatable = [r for r in rows if min(r["ratios"][f] for f in forms_of(r["point"])) <= 1.0]
    near_best = sum(_near_best(r, forms_of(r["point"])) for r in rows)
    near_allowed = sum(_near_best(r, allowed_forms(r["point"])) for r in rows)
    best = {f: sum(min(forms_of(r["point"]), key=lambda g: r["ratios"][g]) == f for r in rows) for f in FORMS}
    at_most_tf = len(rows) - len(slower)
    beaten = sum(r["ratios"][r["default"]] <= 1.0 for r in beatable)
    lines = [f"- {threads} thread{'s' if threads > 1 else ''}{label}: the default form at most 1.0x the official "
             f"model at {at_most_tf} of {len(rows)} points ({_pct(at_most_tf, rows)}; at {beaten} of the "
             f"{len(beatable)} where some form is), within 5% of the best form at {near_best} "
             f"({_pct(near_best, rows)}), of the best form the default may take (no unrolled form past "
             f"{MAX_STEP_WEIGHTS} MiB of step weights) at {near_allowed} ({_pct(near_allowed, rows)}); the fastest "
             "form: " + ", ".join(f"{f} at {n}" for f, n in best.items()) + "."]
    if slower and not label:
        lines.append("  - slower than the official model: " + "; ".join(
            f"{key(r['point'])} ({r['default']} {r['ratios'][r['default']]:.2f}x, A/A {r['ratios']['tf_twin']:.2f})"
            for r in slower))
    return lines


def _pct(n: int, rows: list) -> str:
    return f"{100 * n / len(rows):.1f}%"


def _near_best(r: dict, forms) -> bool:
    """The default form at point ``r`` within 5% of the fastest of ``forms``."""
    return r["ratios"][r["default"]] <= 1.05 * min(r["ratios"][f] for f in forms)


def allowed_forms(p: dict) -> tuple[str, ...]:
    """The forms the default may take for the point's layer: not the unrolled one past the form policy's bound on
    its packed step weights (``MAX_STEP_WEIGHTS``; ``rnn_form="unrolled"`` still writes it)."""
    from fuselite.rnn.forms.policy import MAX_STEP_WEIGHTS

    too_big = size_of(p).step_weights > MAX_STEP_WEIGHTS
    return tuple(f for f in forms_of(p) if not (too_big and f == "unrolled"))


def _good(r: dict, form: str) -> bool:
    """``form`` meets issue 48's bar at point ``r``: at most the official model's time, within 5% of the best."""
    best = min(r["ratios"][f] for f in forms_of(r["point"]))
    return r["ratios"].get(form, float("inf")) <= min(1.0, 1.05 * best) or \
        (best > 1.0 and r["ratios"].get(form, float("inf")) <= 1.05 * best)


def _leaf(rows: list[dict]) -> tuple[str, int]:
    """The one form that meets the bar at the most of ``rows`` (a GRU's "fused" is its unrolled form)."""
    def score(f):
        return sum(_good(r, f if f in forms_of(r["point"]) else "unrolled") for r in rows)
    form = max(FORMS, key=score)
    return form, score(form)


def _splits(rows: list[dict]):
    """Candidate tests on a point: a categorical axis equal to a value, a size axis at most a threshold."""
    for axis in ("family", "direction", "flavour", "output"):
        for value in sorted({r["point"][axis] for r in rows}):
            yield f"{axis} == {value!r}", lambda p, a=axis, v=value: p[a] == v
    for axis in ("units", "steps", "features", "batch"):
        for value in SIZES[axis][:-1]:
            yield f"{axis} <= {value}", lambda p, a=axis, v=value: p[a] <= v
    for mib in (0.5, 1, 2, 4, 8, 16, 32):  # the recurrent weights the unrolled form's steps read (policy.LayerSize)
        yield f"step weights <= {mib} MiB", lambda p, v=mib: size_of(p).step_weights <= v


def size_of(p: dict):
    """The point's layer as the form policy reads it (``policy.LayerSize``; a Bidirectional: two directions)."""
    from fuselite.rnn.forms.policy import LayerSize

    return LayerSize(p["family"], p["units"], p["steps"], p["batch"],
                     2 if p["direction"] == "bidirectional" else 1, sequence=p["output"] == "sequence",
                     features=p["features"])


def fit(rows: list[dict], depth: int = 2) -> tuple[list, int]:
    """A decision tree of ``depth`` tests whose leaves are forms, chosen to meet the bar at the most points
    (greedy, one level at a time): ``([(tests, form, points met, points)], points met)``."""
    form, met = _leaf(rows)
    if depth == 0 or met == len(rows):
        return [([], form, met, len(rows))], met
    best = ([([], form, met, len(rows))], met)
    for name, test in _splits(rows):
        yes = [r for r in rows if test(r["point"])]
        no = [r for r in rows if not test(r["point"])]
        if not yes or not no:
            continue
        left, a = fit(yes, depth - 1)
        right, b = fit(no, depth - 1)
        if a + b > best[1]:
            best = ([([(name, test, True), *t], f, m, n) for t, f, m, n in left] +
                    [([(name, test, False), *t], f, m, n) for t, f, m, n in right], a + b)
    return best


def apply(leaves: list, point: dict) -> str:
    """The form the fitted rule gives ``point`` (a GRU's "fused": its unrolled form)."""
    for tests, form, _, _ in leaves:
        if all(test(point) == want for _, test, want in tests):
            return form if form in forms_of(point) else "unrolled"
    raise AssertionError("the leaves cover every point")


def fitted(results: list[dict], threads: int, depth: int = 2) -> list[str]:
    rows = [r for r in results if r["threads"] == threads]
    if not rows:
        return []
    leaves, met = fit(rows, depth)
    at_most, near = _scores([(r, apply(leaves, r["point"])) for r in rows])
    lines = [f"- {threads} thread{'s' if threads > 1 else ''}: the rule meets the bar at {met} of {len(rows)} points "
             f"(the current default at {sum(_good(r, r['default']) for r in rows)}); at most 1.0x the official "
             f"model at {at_most} ({100 * at_most / len(rows):.0f}%), within 5% of the best form at {near} "
             f"({100 * near / len(rows):.0f}%):"]
    for tests, form, m, n in leaves:
        said = " and ".join(name if want else f"not {name}" for name, _, want in tests)
        lines.append(f"  - {said or 'every point'}: **{form}** ({m} of {n})")
    return lines


def _scores(chosen: list[tuple[dict, str]]) -> tuple[int, int]:
    """Of (point, form) pairs: at how many the form is at most the official model's time, at how many within 5%
    of the point's best form."""
    at_most = sum(r["ratios"][f] <= 1.0 for r, f in chosen)
    near = sum(r["ratios"][f] <= 1.05 * min(r["ratios"][g] for g in forms_of(r["point"])) for r, f in chosen)
    return at_most, near


def cross_validated(results: list[dict], threads: int, folds: int, depth: int, seed: int = 0) -> list[str]:
    """How a rule fitted as ``fit`` does on points it was not fitted on: the points split into ``folds`` seeded
    folds, each fold's points given the form of the tree fitted (``depth`` tests) on the other folds."""
    rows = [r for r in results if r["threads"] == threads]
    if len(rows) < folds:
        return []
    order = sorted(rows, key=lambda r: key(r["point"]))
    np.random.default_rng(seed).shuffle(order)
    chosen = []
    for k in range(folds):
        held = order[k::folds]
        out = {id(r) for r in held}
        leaves, _ = fit([r for r in rows if id(r) not in out], depth)
        chosen += [(r, apply(leaves, r["point"])) for r in held]
    at_most, near = _scores(chosen)
    beatable = [(r, f) for r, f in chosen if min(r["ratios"][g] for g in forms_of(r["point"])) <= 1.0]
    return [f"- {threads} thread{'s' if threads > 1 else ''}, {folds} folds (seed {seed}), trees of {depth} tests: "
            f"at most 1.0x the official model at {at_most} of {len(rows)} points (at "
            f"{sum(r['ratios'][f] <= 1.0 for r, f in beatable)} of the {len(beatable)} where some form is), within "
            f"5% of the best form at {near} ({_pct(near, rows)})."]


def table(results: list[dict], threads: int) -> list[str]:
    lines = ["", f"## {threads} thread{'s' if threads > 1 else ''}", "",
             "| point | TF's form | µs TF | × fused / unrolled / loop | fastest | default (× TF) | A/A | "
             "size × TF (fused / unrolled / loop) |", "|---|---|---|---|---|---|---|---|"]
    for r in (r for r in results if r["threads"] == threads):
        forms = forms_of(r["point"])
        ratio = " / ".join(f"{r['ratios'][f]:.2f}" if f in forms else "—" for f in FORMS)
        size = " / ".join(f"{r['sizes'][f] / r['sizes']['tf']:.2f}" if f in forms else "—" for f in FORMS)
        best = min(forms, key=lambda f: r["ratios"][f])
        lines.append(f"| {key(r['point'])} | {r['official']} | {r['us']['tf']:.1f} | {ratio} | {best} | "
                     f"{r['default']} ({r['ratios'][r['default']]:.2f}) | {r['ratios']['tf_twin']:.2f} | {size} |")
    return lines


def report(results: list[dict], threads: list[int], how: str, started, seconds: float, settings, machine: str,
           versions: str, chosen: str, folds: int = 0, depth: int = 2) -> str:
    from report import fuselite_revision

    lines = ["# Recurrent forms over layer sizes (issue 48)", "",
             f"- Command: `{how}`", f"- Date: {started:%Y-%m-%d %H:%M} UTC (took "
             f"{'?' if seconds is None else f'{seconds:.0f}'} s)",
             f"- Machine: {machine}", f"- Versions: {versions}", f"- Points: {chosen}",
             "- One recurrent layer per point (key: flavour.family.direction.u<units>.t<steps>.f<features>."
             "b<batch>.<output>), the batch static in every model. *× fused / unrolled / loop*: fuselite's forms "
             "over the official converter's model (tf-keras: from_keras_model; Keras 3: a concrete function), "
             "median of the blocks; a GRU has no fused op. *default*: the form `rnn_form=\"default\"` gives the "
             f"layer at that thread count, as the form policy at {fuselite_revision()} gives it. LiteRT `num_threads=N`, interleaved in fresh interpreters, "
             f"{settings.burst} invoke(s) of one before the next, {settings.latency_blocks} blocks of "
             f"{settings.latency_seconds / settings.latency_blocks:.2g} s.", "", "## Summary", ""]
    for n in threads:
        lines += summary(results, n)
    runs = sorted({r.get("run", 0) for r in results})
    for run in runs if len(runs) > 1 else ():
        for n in threads:
            lines += summary([r for r in results if r.get("run", 0) == run], n, f", run {run + 1}'s points")
    lines += ["", "## A rule fitted on these points", "",
              "The bar: a form at most the official model's time and within 5% of the best form (where every form is "
              "slower than the official model, within 5% of the best). A greedy decision tree of "
              f"{'two' if depth == 2 else depth} tests on the "
              "point (family, direction, flavour, output, a size at most a grid value, or the recurrent weights the "
              "unrolled form's steps read at most some MiB) with a form at each leaf, fitted here on the measured "
              "points: in-sample, a check on the form policy's rule (`SIZE_RULES` in `rnn/forms/policy.py`, the "
              "*default* above), which reads the layer's size, features, batch, output, directions and family, not "
              "its flavour.",
              ""]
    for n in threads:
        lines += fitted(results, n, depth)
    if folds:
        lines += ["", "### Off the points it was fitted on", "",
                  f"The same fit, cross-validated (`--cross-validate {folds}`): each point's form from the tree "
                  "fitted on the other folds' points, scored on that point. What a rule of that size, fitted on "
                  "measured points, gives at points it has not seen.", ""]
        for n in threads:
            lines += cross_validated(results, n, folds, depth)
    for n in threads:
        lines += table(results, n)
    return "\n".join(lines) + "\n"


def merged(runs: list[dict]) -> dict:
    """Several ``--results`` files as one: their points together (a point measured twice: the later run's), each
    run's command, versions, start, time and points said."""
    if len(runs) == 1:
        return runs[0]
    results = {(key(r["point"]), r["threads"]): {**r, "run": n} for n, run in enumerate(runs) for r in run["results"]}
    said = [run.get("run", {}) for run in runs]
    return {"how": "; ".join(f"`{run['how']}`" for run in runs).strip("`"),
            "versions": "; ".join(dict.fromkeys(run["versions"] for run in runs)),
            "results": list(results.values()), "failed": [f for run in runs for f in run.get("failed", [])],
            "run": {"started": said[0].get("started"), "machine": said[0].get("machine"),
                    "seconds": sum(m.get("seconds") or 0 for m in said),
                    "chosen": " + ".join(m.get("chosen", "?") for m in said)}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--sample", type=int, default=96, help="points, 1/12 per stratum (default 96; 864: all)")
    p.add_argument("--exclude-sample", type=int, metavar="N",
                   help="leave out the points --sample N takes (a larger sample's new points: a check on them)")
    p.add_argument("--points", nargs="+", metavar="KEY", help="only these points (keys as the report prints)")
    p.add_argument("--latency-seconds", type=float, default=1.5, help="per point and thread count (default 1.5)")
    p.add_argument("--latency-blocks", type=int, default=3)
    p.add_argument("--burst", type=int, default=10)
    p.add_argument("--export", metavar="DIR", help="convert only: write the .tflite files and inputs to DIR")
    p.add_argument("--time", metavar="DIR", help="time the files --export wrote (LiteRT alone, no TensorFlow)")
    p.add_argument("--results", metavar="FILE.json", help="also write the raw measurements here")
    p.add_argument("--from-results", metavar="FILE.json", nargs="+",
                   help="measure nothing: the report of --results files (several: their points together)")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    p.add_argument("--depth", type=int, default=2, help="tests in the rule fitted on the points (default 2; 3 takes "
                   "minutes)")
    p.add_argument("--cross-validate", type=int, default=0, metavar="K",
                   help="with --from-results: also score the fitted rule on points it was not fitted on (K folds)")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.time:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from measure import Settings
    from report import emit, machine_description, write_atomic_text

    settings = Settings(latency_seconds=args.latency_seconds, latency_blocks=args.latency_blocks, control=False,
                        burst=args.burst)
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    if args.from_results:
        runs = [json.loads(Path(f).read_text()) for f in args.from_results]
        saved = merged(runs)
        for r in saved["results"]:  # the forms are measured; the default is what the policy gives now
            r["default"] = default_form(r["point"], r["threads"])
        meta = saved.get("run", {})
        threads = sorted({r["threads"] for r in saved["results"]})
        mtime = datetime.datetime.fromtimestamp(Path(args.from_results[0]).stat().st_mtime, datetime.UTC)
        points = len({key(r["point"]) for r in saved["results"]})
        text = report(saved["results"], threads, saved["how"],
                      datetime.datetime.fromisoformat(meta["started"]) if meta.get("started") else mtime,
                      meta.get("seconds"), settings, meta.get("machine", machine_description()),
                      saved["versions"], meta.get("chosen", f"{points} measured"), args.cross_validate, args.depth)
        failed = saved.get("failed", [])
        emit(text + "".join(f"\n- {f}" for f in ["Not measured:"] * bool(failed) + failed) + "\n" * bool(failed),
             args.out)
        return 0
    points = grid() if args.sample >= 864 else sample(grid(), args.sample)
    chosen = "all 864" if args.sample >= 864 else f"{len(points)} sampled (seed 0, {len(points) // 12} per stratum)"
    if args.exclude_sample:
        left_out = {key(q) for q in sample(grid(), args.exclude_sample)}
        points = [q for q in points if key(q) not in left_out]
        chosen = f"{len(points)}: {chosen} but the {len(left_out)} of --sample {args.exclude_sample}"
    if args.points:
        points, chosen = [q for q in grid() if key(q) in set(args.points)], "as listed with --points"
    results: list[dict] = []

    failed: list[str] = []
    run_info = {}  # the run's command, versions and points, for --results

    def save(done: bool = True):
        """The measurements so far to --results (atomically; after each point, so that a run stopped midway
        keeps what it measured: its "run" says how many points of how many)."""
        if not args.results:
            return
        run = {"started": started.isoformat(), "seconds": time.perf_counter() - t0, "machine": machine_description(),
               "chosen": run_info["chosen"] if done else f"{run_info['chosen']}; stopped after "
                                                     f"{len({key(r['point']) for r in results})} point(s)"}
        write_atomic_text(args.results, json.dumps({"how": run_info["how"], "versions": run_info["versions"],
                                                    "results": results, "failed": failed, "run": run}, indent=1))

    def time_point(q, datas, inputs, names):
        for n in args.threads:
            settings.threads = n
            try:
                results.append(measure(q, datas, inputs, names, settings))
            except Exception as e:  # a model LiteRT refuses: said in the report, not timed
                failed.append(f"{key(q)} at {n} thread(s): not timed: {type(e).__name__}: {str(e)[:200]}")
                print(f"[rnn-sizes] {failed[-1]}", file=sys.stderr, flush=True)
                continue
            r = results[-1]
            print(f"[rnn-sizes] {key(q)} at {n}: default {r['default']} {r['ratios'][r['default']]:.2f}x TF, "
                  f"A/A {r['ratios']['tf_twin']:.2f}", file=sys.stderr, flush=True)
        save(done=False)

    if args.time:
        from importlib.metadata import version

        folder = Path(args.time)
        index = json.loads((folder / "index.json").read_text())
        threads = " ".join(map(str, args.threads))
        run_info["how"] = f"python benchmarks/rnn_sizes.py --time {args.time} --threads {threads}"
        run_info["versions"] = (f"LiteRT (ai-edge-litert) {version('ai-edge-litert')}, NumPy {np.__version__}; "
                                f"the files converted with {index['converted']}")
        run_info["chosen"] = chosen = index["chosen"]
        for entry in index["points"]:
            q = entry["point"]
            datas = {s: (folder / f"{key(q)}.{s}.tflite").read_bytes() for s in (*forms_of(q), "tf", "tf_twin")}
            with np.load(folder / f"{key(q)}.inputs.npz") as saved:
                time_point(q, datas, [saved["arr_0"]], entry["names"])
    else:
        from report import command_line, fuselite_revision
        from report import versions as versions_of

        run_info.update(how=command_line(), chosen=chosen,
                        versions=f"{versions_of()}; fuselite sources at {fuselite_revision()}")
        for n, q in enumerate(points):
            print(f"[rnn-sizes] {n + 1}/{len(points)} {key(q)}: converting ...", file=sys.stderr, flush=True)
            try:
                datas, inputs, names = convert(q, settings.silence)
            except Exception as e:  # a point a converter refuses: said in the report, not timed
                failed.append(f"{key(q)}: not converted: {type(e).__name__}: {str(e)[:200]}")
                print(f"[rnn-sizes] {failed[-1]}", file=sys.stderr, flush=True)
                continue
            if args.export:
                folder = Path(args.export)
                folder.mkdir(parents=True, exist_ok=True)
                for s, data in datas.items():
                    (folder / f"{key(q)}.{s}.tflite").write_bytes(data)
                np.savez(folder / f"{key(q)}.inputs.npz", *inputs)
                results.append({"point": q, "names": names})
                continue
            time_point(q, datas, inputs, names)
        if args.export:
            (Path(args.export) / "index.json").write_text(json.dumps(
                {"converted": f"{versions_of()}; fuselite {fuselite_revision()}", "chosen": chosen,
                 "points": results}, indent=1))
            print(f"wrote {len(results)} points to {args.export}; time them with: python benchmarks/rnn_sizes.py "
                  f"--time {args.export} --threads 1 2 4", file=sys.stderr)
            return 0
    save()
    text = report(results, args.threads, run_info["how"], started, time.perf_counter() - t0, settings,
                  machine_description(), run_info["versions"], chosen)
    emit(text + "".join(f"\n- {f}" for f in ["Not measured:"] * bool(failed) + failed) + "\n" * bool(failed),
         args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
