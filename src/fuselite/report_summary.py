"""The report on one screen (``Report.summary()``, what ``fuselite convert`` prints): what was written, the ops by
kind on one line, each recurrent layer's form and why in a few words, each target's verdict in one line, the
warnings (each once, clipped), and where the details are (``--verbose``, ``--json``, ``--report``). Everything
it leaves out is in ``str(report)`` and ``report.to_json()``."""

from __future__ import annotations

import re

from fuselite.report_lines import element_count, gpu_lines, litert_api_lines, micro_lines

_LINE = 160  # the longest line the summary prints (a clipped one ends in "...")
_KINDS = 8  # op kinds named on the ops line
_WARNINGS = 6  # warnings shown; the rest counted
DETAILS = "  details: --verbose (every op, variable, rule and problem), --json, --report FILE (.txt, .json, .html)"


def _clip(text: str, width: int = _LINE) -> str:
    indent = text[:len(text) - len(text.lstrip())]
    text = indent + " ".join(text.split())
    return text if len(text) <= width else text[:width - 3].rstrip(" ,;:") + "..."


def float_weight_lines(q: dict) -> list[str]:
    """In a weight-quantizing mode (dynamic range, int4, float16), one line per reason that left weights float:
    how many ops, their bytes, the reason (each op's own is in the full report)."""
    if q.get("mode") not in ("dynamic", "int4", "float16"):
        return []
    by_reason: dict[str, list[int]] = {}
    for rec in q.get("ops", []):
        if rec.get("mode") == "float" and rec.get("weight_bytes_after", 0) and rec.get("reason"):
            by_reason.setdefault(rec["reason"], []).append(rec["weight_bytes_after"])
    ranked = sorted(by_reason.items(), key=lambda kv: -sum(kv[1]))
    lines = [f"    float weights, {len(b)} op(s), {sum(b):,} bytes: {reason}" for reason, b in ranked[:_REASONS]]
    if len(ranked) > _REASONS:
        rest = [n for _, b in ranked[_REASONS:] for n in b]
        lines.append(f"    float weights, {len(rest)} more op(s), {sum(rest):,} bytes, for other reasons (the full "
                     "report names each)")
    return lines


_REASONS = 3  # reasons for float weights the summary names


def _counted(items: list[str]) -> list[str]:
    """Each item once, in order, with "(xN)" where it came N times."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return [f"{item} (x{n})" if n > 1 else item for item, n in counts.items()]


_SIZED = re.compile(r"by size at (\d+ threads?): (\d+ units x \d+ steps).*?: ([\d.e+-]+ MiB) of step weights, "
                    r"([^;]*)(?:; but the (\w+) form needs a static batch)?")


def brief_form(form: str) -> str:
    """A recurrent layer's form and its reason in a few words: "loop (by size at 1 thread: 16 units x 47 steps,
    0.28 MiB of step weights; the unrolled form needs a static batch)"."""
    m = re.match(r"([\w-]+) \((.*)\)$", form, re.S)
    if not m:
        return _clip(form, 120)
    name, why = m.groups()
    sized = _SIZED.match(why)
    if sized:
        threads, dims, mib, when, other = sized.groups()
        why = f"by size at {threads}: {dims}, {mib} of step weights" + (
            f"; the {other} form needs a static batch" if other else f"; {when}")
    return f"{name} ({_clip(why, 150)})"


def summary_lines(r) -> list[str]:
    """The summary of report ``r`` (a :class:`fuselite.report.Report`), line by line."""
    n_after = sum(r.ops_after.values())
    lines = [f"fuselite: {r.source}: {n_after} LiteRT ops, {r.size_bytes:,} bytes, {r.total_seconds:.1f} s"]
    if r.signatures:
        lines.append(_clip(f"  signatures: {', '.join(r.signatures)} ({r.subgraphs} subgraph(s))"))
    kinds = sorted(r.ops_after.items(), key=lambda kv: (-kv[1], kv[0]))
    more = f", ... {len(kinds) - _KINDS} more kinds" if len(kinds) > _KINDS else ""
    lines.append(_clip(f"  ops (from {sum(r.ops_before.values())} TF ops): "
                       + ", ".join(f"{k} {n}" for k, n in kinds[:_KINDS]) + more))
    held = []
    if r.frozen_variables:
        held.append(f"{len(r.frozen_variables)} frozen variable(s), "
                    f"{sum(element_count(v['shape']) for v in r.frozen_variables):,} values")
    if r.mutable_variables:
        held.append(f"{len(r.mutable_variables)} resource variable(s)")
    if r.lookup_tables:
        held.append(f"{len(r.lookup_tables)} lookup table(s)")
    if r.text_kernels:
        held.append(f"tensorflow-text kernels: {', '.join(k['custom_code'] for k in r.text_kernels)}")
    if held:
        lines.append(_clip("  holds: " + "; ".join(held)))
    if r.quantization:
        q = r.quantization
        errors = [o["relative_error"] for o in q.get("outputs", []) if o.get("relative_error") is not None]
        err = f"; output error {100 * max(errors):.3g}% of its range" if errors else ""
        calibrated = f"; calibration: {r.calibration['samples']} sample(s)" if r.calibration else ""
        layers = q.get("layers") or {}
        budget = ""
        if "max_relative_error" in layers:
            met = ("met as it is" if not layers["promoted"] else f"met with {len(layers['promoted'])} layer(s) wider") \
                if layers["met"] else "not met"
            budget = f"; error budget {100 * layers['max_relative_error']:.3g}%: {met}"
        lines.append(_clip(f"  quantization: {q['mode']}, weights {q.get('weight_bytes_before', 0):,} -> "
                           f"{q.get('weight_bytes_after', 0):,} bytes{calibrated}{err}{budget}", 200))
        lines += [_clip(line, 240) for line in float_weight_lines(q)]
    for c in r.composites:
        name = c["interface"].removeprefix("keras.layers.")
        sites = f" x{c['call_sites']}" if c.get("call_sites", 1) > 1 else ""
        if c["status"] == "fused" and c.get("form"):
            lines.append(_clip(f"  recurrent {name}{sites}: {brief_form(c['form'])}", 200))
        elif c["status"] == "fused":
            lines.append(_clip(f"  fused {name}{sites}: {len(c['into'])} op(s)"))
        else:
            lines.append(_clip(f"  not fused {name}{sites} ({c['status']}): {c['reason']}"))
    if r.generative:
        g = r.generative
        lines.append(_clip(f"  generative (LiteRT-LM): {', '.join(g['signatures'])}; KV cache {g['cache_length']} "
                           f"positions, {g['cache_bytes']:,} bytes"))
    if r.litert_api:
        lines.append(_clip(" ".join(litert_api_lines(r.litert_api))))
    if r.gpu:
        gpu = gpu_lines(r.gpu)
        problems = [p.split(":")[0] for p in r.gpu.get("problems", [])] if not r.gpu.get("ran") else []
        head = gpu[0].rstrip(":")
        lines.append(_clip(head + (f": {', '.join(dict.fromkeys(problems))}" if problems else "")))
    if r.npu:
        n = r.npu
        lines.append(_clip(f"  NPU ({n['vendor']} {n['soc']}): {n.get('partitions', 0)} partition(s), "
                           f"{n.get('npu_ops', 0)} of {n.get('ops', 0)} ops offloaded"))
    if r.state_io:
        lines.append(_clip("  state as inputs and outputs: " + ", ".join(s["name"] for s in r.state_io)))
    if r.micro:
        m = r.micro
        if m["runs"]:
            lines += [_clip(line) for line in micro_lines(m)]
        else:
            problems = _counted([re.sub(r" '[^']*'", "", p, count=1) for p in m["problems"]])  # (no node names)
            lines.append(_clip(f"  TFLite Micro: would not run ({len(problems)} problem(s); target='micro' converts "
                               f"to forms it runs): {problems[0]}", 240))
    if r.ethos_u:
        e = r.ethos_u
        lines.append(_clip(f"  Ethos-U ({e['accelerator']}, Vela): {e['npu_ops']} of {e['ops']} op(s) on the NPU"
                           + (f", {len(e['cpu_ops'])} on the CPU" if e["cpu_ops"] else " (all)")))
    warnings = _counted(r.warnings)
    for w in warnings[:_WARNINGS]:
        lines.append(_clip(f"  warning: {w}"))
    if len(warnings) > _WARNINGS:
        lines.append(f"  ... and {len(warnings) - _WARNINGS} more warning(s)")
    lines.append(DETAILS)
    return lines
