"""The conversion report as one self-contained HTML page (``fuselite convert --report report.html``).

No scripts, no external files: inline CSS only, so the page opens from disk anywhere and
can be attached to a bug report. Sections: summary (source, size, time, warnings), the
composites (fused or declined, with the rule, what it became or why not, the fusion check's
error and the user's source lines), the stages with their times as bars, ops before and
after, quantization per op (when quantized) and TFLite Micro compatibility.

Example::

    html = render_html(conv.report.to_dict())
    open("report.html", "w").write(html)
"""

from __future__ import annotations

from html import escape

from fuselite.tflite.names import readable

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 70em;
       color: #1d1d1f; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.sub { color: #666; } table { border-collapse: collapse; margin: .5em 0; max-width: 100%; } td, th {
padding: .25em .7em; text-align: left; vertical-align: top; border-bottom: 1px solid #eee; }
th, td.n { white-space: nowrap; } td.w { overflow-wrap: anywhere; } th { background: #f5f5f7; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } code { font: 12px ui-monospace, monospace; }
.fused { color: #0a7d32; font-weight: 600; } .declined, .bad { color: #b3261e; font-weight: 600; }
.bar { background: #4f7cff; height: .8em; display: inline-block; border-radius: 2px; }
.cols { display: flex; gap: 3em; flex-wrap: wrap; } .warn { background: #fff4d6; padding: .4em .7em;
border-radius: 4px; margin: .3em 0; } .cards { display: flex; gap: 1em; flex-wrap: wrap; margin: 1em 0; }
.card { background: #f5f5f7; border-radius: 6px; padding: .6em 1em; min-width: 9em; }
.card b { display: block; font-size: 1.3em; }
"""


def _table(head: list[str], rows: list[list], numeric: set[int] = frozenset(), wrap: set[int] = frozenset()) -> str:
    """Numeric columns right-aligned and unbroken; ``wrap`` columns (long names) broken anywhere to fit."""
    out = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td class='n'>{c}</td>" if i in numeric else f"<td class='w'>{c}</td>"
                                    if i in wrap else f"<td>{c}</td>" for i, c in enumerate(row)) + "</tr>")
    return "".join(out) + "</table>"


def _composites(composites: list[dict]) -> str:
    if not composites:
        return "<p class='sub'>No composite functions in this program.</p>"
    rows = []
    for c in composites:
        status = c.get("status", "?")
        cls = "fused" if status == "fused" else "declined"
        what = (", ".join(escape(k) for k in c.get("into", [])) if status == "fused"
                else escape(c.get("reason", "")))
        if c.get("form"):
            what += f" <span class='sub'>(form: {escape(c['form'])})</span>"
        check = c.get("check") or {}
        err = f"{check['max_abs_error']:.2g}" if check.get("max_abs_error") is not None else "—"
        lines = "<br>".join(f"<code>{escape(s)}</code>" for s in c.get("source_lines", [])) or "—"
        rows.append([f"<code>{escape(c.get('interface', ''))}</code>", f"<span class='{cls}'>{escape(status)}</span>",
                     escape(c.get("rule") or "—"), what, err, str(c.get("call_sites", "")), lines])
    return _table(["composite", "status", "rule", "became / why not", "check error", "calls", "source"], rows, {4, 5},
                  {3, 6})


def _recurrent(recurrent: dict, composites: list[dict]) -> str:
    """Why the recurrent layers got their forms (thread count, target), where some layer has one."""
    if not recurrent or not any(c.get("form") for c in composites):
        return ""
    return (f"<p class='sub'>Recurrent forms: {escape(recurrent['reason'])}; target "
            f"{escape(recurrent['target'])}.</p>")


def _stages(stages: dict[str, float]) -> str:
    total = sum(stages.values()) or 1.0
    longest = max(stages.values(), default=0.0) or 1.0
    rows = [[f"<code>{escape(name)}</code>", f"{s * 1000:.1f}", f"{100 * s / total:.0f}%",
             f"<span class='bar' style='width:{max(1, round(300 * s / longest))}px'></span>"]
            for name, s in stages.items()]
    return _table(["pass (in order)", "ms", "share", ""], rows, {1, 2})


def _ops(ops: dict[str, int]) -> str:
    rows = [[f"<code>{escape(k)}</code>", str(v)] for k, v in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))]
    return _table(["op", "count"], rows, {1})


def _quantization(q: dict) -> str:
    if not q:
        return "<p class='sub'>Not quantized.</p>"
    parts = [f"<p>Mode <b>{escape(str(q.get('mode')))}</b>; weights {q.get('weight_bytes_before', 0):,} → "
             f"{q.get('weight_bytes_after', 0):,} bytes.</p>"]
    rows = []
    for rec in q.get("ops", []):
        err = rec.get("output_error")
        rows.append([f"<code>{escape(rec.get('kind', ''))}</code>", escape(readable(str(rec.get("op", "")))),
                     escape(str(rec.get("mode", ""))), f"{rec.get('weight_bytes_before', 0):,}",
                     f"{rec.get('weight_bytes_after', 0):,}",
                     f"{100 * err['relative_error']:.2g}%" if err else "—",
                     escape(rec.get("scheme") or rec.get("reason") or "")])
    parts.append(_table(["op", "node", "mode", "weights before", "after", "output error", "how"], rows, {3, 4, 5},
                        {1, 6}))
    for out in q.get("outputs", []):
        parts.append(f"<p>Output <code>{escape(out['name'])}</code> against the float model: max abs "
                     f"{out['max_abs_error']:.3g}, {100 * out['relative_error']:.3g}% of its range.</p>")
    return "".join(parts)


def _micro(m: dict) -> str:
    if not m:
        return ""
    if m.get("runs"):
        text = "<span class='fused'>runs</span>: every op has a TFLite Micro kernel"
        if m.get("ran"):
            text += ", and it ran on TFLite Micro's interpreter"
        if "arena_bytes" in m:
            text += f"; tensor arena {m['arena_bytes']:,} bytes (measured)"
        return f"<p>{text}.</p>"
    items = "".join(f"<li>{escape(p)}</li>" for p in m.get("problems", []))
    return f"<p><span class='bad'>would not run</span> on TFLite Micro:</p><ul>{items}</ul>"


def _ethos_u(e: dict) -> str:
    if not e:
        return ""
    rows = "".join(f"<tr><td>{escape(c['op'])}</td><td><code>{escape(c.get('tensor') or '')}</code></td>"
                   f"<td>{escape(c['reason'])}</td></tr>" for c in e.get("cpu_ops", []))
    table = f"<table><tr><th>CPU op</th><th>output</th><th>Vela's reason</th></tr>{rows}</table>" if rows else ""
    cycles = f"; Vela's estimate {e['cycles']:,} cycles" if e.get("cycles") is not None else ""
    sram = f", SRAM {e['sram_kib']:.1f} KiB" if e.get("sram_kib") is not None else ""
    return (f"<h2>Ethos-U</h2><p>{escape(e['accelerator'])}: {e['npu_ops']} of {e['ops']} op(s) on the NPU"
            f"{escape(cycles + sram)}.</p>{table}")


def render_html(report: dict) -> str:
    """The page for a report's :meth:`~fuselite.report.Report.to_dict`."""
    composites = report.get("composites", [])
    fused = sum(c.get("status") == "fused" for c in composites)
    before, after = sum(report.get("ops_before", {}).values()), sum(report.get("ops_after", {}).values())
    cards = [("size", f"{report.get('size_bytes', 0):,} bytes"), ("time", f"{report.get('total_seconds', 0):.2f} s"),
             ("ops", f"{before} TF → {after} LiteRT"), ("composites", f"{fused} of {len(composites)} fused"),
             ("signatures", ", ".join(report.get("signatures", [])) or "—")]
    warnings = "".join(f"<div class='warn'>{escape(w)}</div>" for w in report.get("warnings", []))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>fuselite report: {escape(report.get('source', ''))}</title>
<style>{_CSS}</style></head><body>
<h1>fuselite conversion report</h1>
<div class="sub">{escape(report.get('source', ''))}</div>
<div class="cards">{''.join(f"<div class='card'>{escape(k)}<b>{escape(v)}</b></div>" for k, v in cards)}</div>
{warnings}
<h2>Composites</h2>
{_composites(composites)}
{_recurrent(report.get('recurrent') or {}, composites)}
<h2>Stages</h2>
{_stages(report.get('stage_seconds', {}))}
<h2>Ops</h2>
<div class="cols"><div><h3>before (TensorFlow)</h3>{_ops(report.get('ops_before', {}))}</div>
<div><h3>after (LiteRT)</h3>{_ops(report.get('ops_after', {}))}</div></div>
<h2>Quantization</h2>
{_quantization(report.get('quantization', {}))}
<h2>TFLite Micro</h2>
{_micro(report.get('micro', {}))}
{_ethos_u(report.get('ethos_u', {}))}
</body></html>
"""
