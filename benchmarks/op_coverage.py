#!/usr/bin/env python
"""Op coverage: every TF op that ``tf.lite.TFLiteConverter`` legalizes to a TFLite builtin, converted by fuselite
and by the official converter, each file run on stock LiteRT on both kernel sets and compared with TF eager.

The cases are in ``op_cases.py`` (one small ``tf.function`` per op and attribute variant; where the official
converter handles each op). Each case is converted with ``fuselite.Converter.from_concrete_functions([cf])`` and
with ``tf.lite.TFLiteConverter.from_concrete_functions([cf], trackable)`` (both with defaults: the official
converter's op set is TFLITE_BUILTINS), each model run on ``ai_edge_litert``'s ``Interpreter`` with XNNPACK (the
default) and on the builtin kernels alone, and compared with TF eager (``op_cases.judge``). A result is one of:

* right: both kernel sets give TF's numbers;
* wrong: it runs and a kernel set gives other numbers (the first difference is shown);
* refused: the conversion raised (its first line);
* fails at run time: the model does not load, prepare or invoke on stock LiteRT;
* crashed: the child process died (or ran past ``--timeout``) converting or running it.

An op is right for a converter when every case of it is. Cases run in child processes (a converter or a kernel may
crash), ``--batch`` cases per child, at most ``--jobs`` children at a time; when a child dies, the rest of its batch
runs again one case per child, so one crash costs one case. Example::

    .venv/bin/python benchmarks/op_coverage.py --out docs/op-coverage.md
    .venv/bin/python benchmarks/op_coverage.py --only 'conv|pool' --converter fuselite
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import json
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERTERS = ("fuselite", "official")
LABEL = {"fuselite": "fuselite", "official": "tf.lite.TFLiteConverter"}
EXTRA_CASES = "OP_COVERAGE_EXTRA_CASES"
STATUSES = ("right", "wrong", "refused", "fails at run time", "crashed", "case error")


# -------------------------------------------------------------------------------------------------------------
# in the child: one case with one converter
# -------------------------------------------------------------------------------------------------------------


def _first_line(e: BaseException, limit: int = 240) -> str:
    """The first meaningful line of an exception (the official converter's: its first ``error:`` line)."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error:" in ln]
    line = errors[0] if errors else (lines[0] if lines else "")
    if line.endswith(":") and line in lines and lines.index(line) + 1 < len(lines):  # "N op(s) cannot ...:\n - X"
        line += " " + lines[lines.index(line) + 1].lstrip("- ")
        line = re.sub(r" \(at [^)]*\)", "", line)
    line = re.sub(r"^.*?error: ", "", line)
    line = re.sub(r"loc\([^)]*\):?\s*", "", line).strip()
    out = f"{type(e).__name__}: {line}".rstrip(": ")
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _named(fn, n: int):
    """``fn`` as a function of ``in0, in1, ...`` (the names both converters give the model's inputs)."""
    import tensorflow as tf

    args = ", ".join(f"in{k}" for k in range(n))
    ns = {"fn": fn, "flatten": tf.nest.flatten}
    # a flat tuple: both converters then name the outputs output_0, output_1, ... in TF's order (the official
    # converter names a namedtuple's fields, which LiteRT's signature runner sorts by name)
    exec(f"def call({args}):\n    return tuple(flatten(fn({args})))\n", ns)  # noqa: S102 - a fixed template
    return ns["call"]


def _instance(case):
    """A fresh ``(fn, trackable)`` for the case (stateful cases build new variables and tables)."""
    import tensorflow as tf

    if case.make is not None:
        return case.make()
    return case.fn, tf.Module()


def _convert(case, converter: str) -> bytes:
    import tensorflow as tf
    from op_cases import specs_of

    fn, trackable = _instance(case)
    tff = tf.function(_named(fn, len(case.inputs)), autograph=False)
    trackable.f = tff
    cf = tff.get_concrete_function(*specs_of(case))
    if converter == "fuselite":
        import fuselite

        return fuselite.Converter.from_concrete_functions([cf]).convert()
    return tf.lite.TFLiteConverter.from_concrete_functions([cf], trackable).convert()


def _kernel_options(builtin: bool) -> dict:
    if not builtin:
        return {}
    from ai_edge_litert.interpreter import OpResolverType

    return {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}


def _output_order(names) -> list[str]:
    def key(n):
        m = re.fullmatch(r"output_(\d+)", n)
        return (0, int(m.group(1)), n) if m else (1, 0, n)
    return sorted(names, key=key)


def _run_litert(model: bytes, values: list, builtin: bool) -> list:
    """The model's outputs on stock LiteRT (one signature, inputs ``in0, in1, ...``)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=model, num_threads=1, **_kernel_options(builtin))
    sigs = interp.get_signature_list()
    if not sigs:
        interp.allocate_tensors()
        for d, x in zip(interp.get_input_details(), values):
            interp.resize_tensor_input(d["index"], np.shape(x))
        interp.allocate_tensors()
        for d, x in zip(interp.get_input_details(), values):
            interp.set_tensor(d["index"], x)
        interp.invoke()
        return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
    key = next(iter(sigs))
    runner = interp.get_signature_runner(key)
    names = list(sigs[key]["inputs"])
    wanted = [f"in{k}" for k in range(len(values))]
    if sorted(names) == sorted(wanted):
        feed = dict(zip(wanted, values))
    else:  # the model's own input order
        feed = dict(zip(_signature_inputs(model, key) or names, values))
    out = runner(**feed)
    return [np.asarray(out[n]) for n in _output_order(out)]


def _signature_inputs(model: bytes, key: str) -> list[str] | None:
    from ai_edge_litert import schema_py_generated as schema

    m = schema.Model.GetRootAs(bytes(model), 0)
    for k in range(m.SignatureDefsLength()):
        sig = m.SignatureDefs(k)
        if sig.SignatureKey() is not None and sig.SignatureKey().decode() == key:
            return [sig.Inputs(j).Name().decode() for j in range(sig.InputsLength())]
    return None


def _ops(model: bytes) -> list[str]:
    from ai_edge_litert.interpreter import Interpreter

    try:
        return sorted({d["op_name"] for d in Interpreter(model_content=model)._get_ops_details()})
    except Exception:
        return []


def _reference(case, values: list) -> list:
    import numpy as np
    import tensorflow as tf

    fn, _ = _instance(case)
    out = fn(*[tf.constant(x) for x in values])
    return [np.asarray(t.numpy() if hasattr(t, "numpy") else t) for t in tf.nest.flatten(out)]


def run_unit(case, converter: str, stage: list) -> dict:
    """One case with one converter: converted, run on both kernel sets, judged (``stage`` says how far it got)."""
    from op_cases import judge, values_of

    t0 = time.perf_counter()
    res = {"id": case.id, "op": case.op, "converter": converter}
    values = values_of(case)
    try:
        stage[0] = "computing TF's reference"
        want = _reference(case, values)
    except Exception as e:
        return {**res, "status": "case error", "detail": "TF eager: " + _first_line(e)}
    try:
        stage[0] = "converting"
        model = _convert(case, converter)
    except Exception as e:
        return {**res, "status": "refused", "detail": _first_line(e), "seconds": time.perf_counter() - t0}
    res["ops"] = _ops(model)
    wrong = []
    for builtin in (False, True):
        kernels = "builtin kernels" if builtin else "XNNPACK"
        try:
            stage[0] = f"running on {kernels}"
            got = _run_litert(model, values, builtin)
        except Exception as e:
            return {**res, "status": "fails at run time", "detail": f"{kernels}: {_first_line(e)}",
                    "seconds": time.perf_counter() - t0}
        why = judge(case, got, want)
        if why:
            wrong.append(f"{kernels}: {why}")
    res["seconds"] = time.perf_counter() - t0
    if wrong:
        if len(wrong) == 2 and wrong[0].split(": ", 1)[1] == wrong[1].split(": ", 1)[1]:
            wrong = ["both kernel sets: " + wrong[0].split(": ", 1)[1]]
        return {**res, "status": "wrong", "detail": "; ".join(wrong)}
    return {**res, "status": "right", "detail": ""}


def child(units: list[list[str]]) -> int:
    """Run ``units`` ([case id, converter] pairs), one protocol line each on the original stdout."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # converters and kernels write to fd 1: keep the protocol clean
    sys.path.insert(0, HERE)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    try:
        import op_cases
    except Exception as e:  # e.g. a half-written module someone is editing: every unit fails the same way
        for cid, conv in units:
            proto.write("RESULT " + json.dumps({"id": cid, "converter": conv, "status": "case error",
                                                "detail": "importing the cases: " + _first_line(e)}) + "\n")
        return 0
    by_id = {c.id: c for c in op_cases.CASES}
    if os.environ.get(EXTRA_CASES):  # a module with more CASES (the benchmark's own tests: a case that crashes)
        import importlib

        by_id.update({c.id: c for c in importlib.import_module(os.environ[EXTRA_CASES]).CASES})
    for cid, conv in units:
        proto.write("START " + json.dumps([cid, conv]) + "\n")
        stage = ["starting"]
        stop = threading.Event()

        def report_stage(stage=stage, stop=stop):
            last = None
            while not stop.wait(0.5):
                if stage[0] != last:
                    last = stage[0]
                    proto.write("STAGE " + json.dumps(last) + "\n")

        watcher = threading.Thread(target=report_stage, daemon=True)
        watcher.start()
        try:
            res = run_unit(by_id[cid], conv, stage)
        except BaseException as e:  # noqa: BLE001 - a bug in a rule must cost one case, not the batch
            res = {"id": cid, "converter": conv, "status": "crashed", "detail": f"{stage[0]}: {_first_line(e)}"}
        stop.set()
        watcher.join()
        proto.write("RESULT " + json.dumps(res) + "\n")
    return 0


# -------------------------------------------------------------------------------------------------------------
# in the parent: batches of units in children, at most --jobs at a time
# -------------------------------------------------------------------------------------------------------------


def _stderr_tail(path: str) -> str:
    try:
        with open(path, errors="replace") as fh:
            lines = [ln.strip() for ln in fh.read()[-20000:].splitlines() if ln.strip()]
    except OSError:
        return ""
    keep = [ln for ln in lines if re.search(r"Fatal|Check failed|Segmentation|Abort|error|Error", ln)]
    line = (keep or lines or [""])[-1]
    return line if len(line) <= 200 else line[:199] + "…"


def _run_batch(units: list, timeout: float, results: dict, retry: queue.Queue, lock: threading.Lock) -> None:
    """Run ``units`` in one child; on a crash or time-out the unit in progress is 'crashed' and the rest of the
    batch goes back to ``retry`` one unit per child."""
    with tempfile.TemporaryDirectory(prefix="op-coverage-") as scratch:
        err_path = os.path.join(scratch, "stderr.txt")
        with open(err_path, "w") as err:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]).rstrip(
                os.pathsep), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
            proc = subprocess.Popen([sys.executable, os.path.join(HERE, "op_coverage.py"), "--child",
                                     json.dumps(units)], stdout=subprocess.PIPE, stderr=err, cwd=scratch, env=env,
                                    text=True, bufsize=1)
            lines: queue.Queue = queue.Queue()

            def read():
                for line in proc.stdout:
                    lines.put(line)
                lines.put(None)

            threading.Thread(target=read, daemon=True).start()
            pending = [tuple(u) for u in units]
            current, stage, deadline = None, "starting", time.monotonic() + timeout + 60  # + TF's import
            why = None
            while True:
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    why = f"timed out after {timeout:.0f} s ({stage})"
                    proc.kill()
                    break
                if line is None:
                    break
                kind, _, body = line.strip().partition(" ")
                if kind == "START":
                    current, stage, deadline = tuple(json.loads(body)), "starting", time.monotonic() + timeout
                elif kind == "STAGE":
                    stage = json.loads(body)
                elif kind == "RESULT":
                    res = json.loads(body)
                    with lock:
                        results[(res["id"], res["converter"])] = res
                    key = (res["id"], res["converter"])
                    if key in pending:
                        pending.remove(key)
                    current = None
            proc.wait()
        if not pending:
            return
        if why is None:
            why = f"the child died (exit status {proc.returncode}) {stage}"
            tail = _stderr_tail(err_path)
            if tail:
                why += f": {tail}"
        if current is None:  # it died between cases (or before the first): run them again alone
            current = pending[0] if len(units) == 1 else None
        if current is not None:
            with lock:
                cid, conv = current
                results[current] = {"id": cid, "converter": conv, "status": "crashed", "detail": why}
            pending = [u for u in pending if u != current]
        for u in pending:
            retry.put([list(u)])


def run_all(case_ids: list[str], converters: list[str], jobs: int, batch: int, timeout: float,
            progress=None) -> dict:
    """{(case id, converter): result} for every case and converter, in children."""
    units = [[cid, conv] for cid in case_ids for conv in converters]
    return run_units(units, jobs, batch * len(converters), timeout, progress)


def run_units(units: list[list[str]], jobs: int, size: int, timeout: float, progress=None) -> dict:
    """{(case id, converter): result} for each ``[case id, converter]`` unit, ``size`` units per child."""
    size = max(1, size)
    work: queue.Queue = queue.Queue()
    for k in range(0, len(units), size):
        work.put(units[k:k + size])
    results: dict = {}
    lock = threading.Lock()
    busy = [0]

    def worker():
        while True:
            try:
                b = work.get(timeout=0.5)
            except queue.Empty:
                with lock:
                    if busy[0] == 0 and work.empty():
                        return
                continue
            with lock:
                busy[0] += 1
            try:
                _run_batch(b, timeout, results, work, lock)
            finally:
                with lock:
                    busy[0] -= 1
                if progress:
                    progress(len(results), len(units))

    threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for cid, conv in units:  # nothing is lost, whatever happened
        results.setdefault((cid, conv), {"id": cid, "converter": conv, "status": "crashed",
                                         "detail": "no result came back"})
    return results


# -------------------------------------------------------------------------------------------------------------
# the report
# -------------------------------------------------------------------------------------------------------------


def _cell(res: dict | None) -> str:
    if res is None:
        return "not run"
    text = res["status"] if res["status"] == "right" else f"{res['status']}: {res.get('detail', '')}"
    text = text.replace("|", "\\|").replace("\n", " ")
    return "✓" if res["status"] == "right" else text


def summarize(cases: list, results: dict, converters: list[str]) -> dict:
    """Per converter: cases by status, ops right; per op: right or not."""
    out = {}
    for conv in converters:
        counts = {s: 0 for s in STATUSES}
        op_right: dict[str, bool] = {}
        for c in cases:
            r = results.get((c.id, conv))
            st = r["status"] if r else "crashed"
            counts[st] += 1
            op_right[c.op] = op_right.get(c.op, True) and st == "right"
        out[conv] = {"cases": counts, "ops_right": sum(op_right.values()), "op_right": op_right}
    return out


def render(cases: list, results: dict, converters: list[str], head: list[str]) -> str:
    from op_cases import FILES, OFFICIAL_WRONG

    ops = list(dict.fromkeys(c.op for c in cases))
    summary = summarize(cases, results, converters)
    lines = ["# Op coverage: every TF op the official converter lowers to a builtin, fuselite and "
             "tf.lite.TFLiteConverter", "", *head,
             f"- {len(ops)} TF ops, {len(cases)} cases (`benchmarks/op_cases.py`: one small `tf.function` per op and "
             "attribute variant, fixed inputs). Each converter with its defaults (`fuselite.Converter."
             "from_concrete_functions([cf])`; `tf.lite.TFLiteConverter.from_concrete_functions([cf], trackable)`, "
             "builtin ops only); each model run on stock LiteRT (`ai_edge_litert`'s `Interpreter`, 1 thread) with "
             "XNNPACK and on the builtin kernels alone, compared with TF eager: floats within 1e-5 × max(1, max "
             "|TF|) (a case that states more says why), integers, bools and strings exactly, dtypes and shapes "
             "equal; random ops by shape, dtype and distribution; `Empty` by shape and dtype.",
             "- The op list: the `TF_*Op` on the left of each pattern of the official converter's "
             "`legalize_patterns.td`, its `legalize_tf.cc` patterns, the TF lowerings `legalize_tf.cc` pulls in "
             "(`lower_tf.td`, `lower_tf.cc`), `prepare_tf.cc`'s conversions, its tensor-list, variable, hash-table "
             "and control-flow legalizations, the ops the graph import and canonicalization remove, and the ops it "
             "was measured to lower to builtins by default where the file was not traced (source `OBS`); ops that "
             "take quantized types (`Dequantize`) are left out. The source column names the file.",
             "- Results: right; wrong (runs, other numbers: the first difference); refused (the conversion "
             "raised: its first line); fails at run time (stock LiteRT does not load, prepare or invoke it); "
             "crashed (the child process died or timed out). An op is right when all its cases are.", ""]
    lines += ["| | " + " | ".join(LABEL[c] for c in converters) + " |",
              "|---|" + "---|" * len(converters)]
    lines.append("| ops right | " + " | ".join(f"{summary[c]['ops_right']} of {len(ops)}" for c in converters) + " |")
    for st in STATUSES:
        if any(summary[c]["cases"][st] for c in converters) or st in ("right", "wrong", "refused"):
            label = "cases " + st
            lines.append(f"| {label} | " + " | ".join(f"{summary[c]['cases'][st]} of {len(cases)}"
                                                      for c in converters) + " |")
    lines.append("")
    if len(converters) == 2:
        fl, tfl = (summary[c]["op_right"] for c in CONVERTERS)
        only_tf = [o for o in ops if tfl[o] and not fl[o]]
        only_fl = [o for o in ops if fl[o] and not tfl[o]]
        neither = [o for o in ops if not fl[o] and not tfl[o]]
        lines += ["## Where they differ", "",
                  f"- Right with tf.lite.TFLiteConverter only ({len(only_tf)}): " + (", ".join(only_tf) or "none"),
                  f"- Right with fuselite only ({len(only_fl)}): " + (", ".join(only_fl) or "none"),
                  f"- Right with neither ({len(neither)}): " + (", ".join(neither) or "none"),
                  "- Cases where the official converter is known to be wrong: " + ", ".join(OFFICIAL_WRONG), ""]
    if "fuselite" in converters:
        bad = [c for c in cases if results.get((c.id, "fuselite"), {}).get("status") != "right"]
        lines += [f"## Cases fuselite does not get right ({len(bad)})", ""]
        lines += [f"- `{c.id}` ({c.op}): {_cell(results.get((c.id, 'fuselite')))}" for c in bad] or ["- none"]
        lines.append("")
    lines += ["## Every case", "",
              "Source: where the official converter handles the op (" + "; ".join(
                  f"{k}: `{v}`" for k, v in FILES.items()) + ").", "",
              "| case | TF op | source | " + " | ".join(LABEL[c] for c in converters) + " |",
              "|---|---|---|" + "---|" * len(converters)]
    for c in cases:
        note = f" ({c.why})" if c.why else ""
        lines.append(f"| `{c.id}`{note} | {c.op} | {c.source} | "
                     + " | ".join(_cell(results.get((c.id, conv))) for conv in converters) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    p.add_argument("--json", help="also write every result here (default: --out with .json)")
    p.add_argument("--only", metavar="PATTERN", help="the cases whose id or TF op matches this regular expression")
    p.add_argument("--converter", choices=("fuselite", "official", "both"), default="both")
    p.add_argument("--jobs", type=int, default=2, help="child processes at a time (default 2)")
    p.add_argument("--batch", type=int, default=30, help="cases per child process (default 30)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one case may take with one converter")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))

    sys.path.insert(0, HERE)
    from op_cases import CASES
    from report import command_line, emit, fuselite_revision, machine_description, versions

    cases = [c for c in CASES if not args.only or re.search(args.only, c.id) or re.search(args.only, c.op)]
    if not cases:
        p.error(f"no case matches {args.only!r}")
    converters = list(CONVERTERS) if args.converter == "both" else [args.converter]
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()

    def progress(done, total):
        print(f"[op-coverage] {done}/{total} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

    results = run_all([c.id for c in cases], converters, args.jobs, args.batch, args.timeout, progress)
    took = time.perf_counter() - t0
    head = [f"- Command: `{command_line()}` (from `{os.getcwd()}`)",
            f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {took:.0f} s, {args.jobs} child processes at a time)",
            f"- Machine: {machine_description()}",
            f"- Versions: {versions()}; fuselite sources at {fuselite_revision()}"]
    emit(render(cases, results, converters, head), args.out)
    json_path = args.json or (os.path.splitext(args.out)[0] + ".json" if args.out else None)
    if json_path:
        summary = summarize(cases, results, converters)
        data = {"date": f"{started:%Y-%m-%d %H:%M} UTC", "seconds": round(took), "converters": converters,
                "summary": {c: {k: v for k, v in s.items() if k != "op_right"} for c, s in summary.items()},
                "ops": {c: s["op_right"] for c, s in summary.items()},
                "cases": [{"id": c.id, "op": c.op, "source": c.source,
                           **{conv: results.get((c.id, conv)) for conv in converters}} for c in cases]}
        tmp = json_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, json_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
