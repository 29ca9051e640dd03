"""Lines of the text report that its summary shares (``report.py``, ``report_summary.py``): which LiteRT APIs
the file loads in, its GPU placement, its TFLite Micro verdict, lists wrapped to :data:`WIDTH` columns."""

from __future__ import annotations

WIDTH = 100  # columns of the text report's wrapped lists


def litert_api_lines(a: dict) -> list[str]:
    import textwrap

    if "CompiledModel" not in a["apis"]:
        return textwrap.wrap(f"LiteRT API: the Interpreter alone ({a['why']})", WIDTH - 2, initial_indent="  ",
                             subsequent_indent="    ")
    err = a.get("compiled_model_error")
    ran = f" (run in both: {100 * err:.2g}% of the range apart)" if err is not None else ""
    return [f"  LiteRT API: the Interpreter and CompiledModel{ran}"]


def gpu_lines(g: dict) -> list[str]:
    if g.get("ran"):
        errors = g.get("error_against_cpu") or {}
        worst = max(errors.values(), default=None)
        at = f" at {g['precision']}" if "precision" in g else ""
        against = f"; outputs {100 * worst:.2g}% of their range from the CPU's" if worst is not None else ""
        fp32 = g.get("error_against_cpu_fp32")
        if fp32:
            against += f", {100 * max(fp32.values()):.2g}% at fp32"
        return [f"  LiteRT GPU: every op on its GPU accelerator (run there{at} before writing{against})"]
    not_run = f"not run ({g['why'].split(';')[0]}); " if "why" in g else ""
    if g.get("predicted"):
        return [f"  LiteRT GPU: {not_run}every op is one its GPU accelerator takes (read from the file)"]
    return [f"  LiteRT GPU: {not_run}would not run fully on its GPU accelerator (target='gpu' writes forms it runs):",
            *wrapped(g.get("problems", []), "    ")]


def micro_lines(m: dict) -> list[str]:
    problems = list(dict.fromkeys(m["problems"]))  # (two directions of a layer: the same problem twice)
    if not m["runs"]:
        return [f"  TFLite Micro: would not run ({len(problems)} problem(s)): " + "; ".join(problems[:3])
                + (" ..." if len(problems) > 3 else "") + " (target='micro' converts to forms it runs)"]
    line = ("  target micro: " if m.get("target") == "micro" else "  TFLite Micro: ") + (
        "ran on TFLite Micro's interpreter" if m.get("ran") else "every op has a kernel there (a static check)")
    if "arena_bytes" in m:
        line += f"; tensor arena {m['arena_bytes']:,} bytes (measured)"
    lines = [line]
    if m.get("sources"):
        lines.append("  TFLite Micro sources: " + ", ".join(m["sources"]))
    return lines


def wrapped(items: list[str], indent: str) -> list[str]:
    """``items`` joined with ", " in lines of at most :data:`WIDTH` columns (an item longer than that on its own
    line), each starting with ``indent``; no item is split."""
    lines, line = [], ""
    for item in items:
        if line and len(indent) + len(line) + len(item) + 2 > WIDTH:
            lines.append(indent + line + ",")
            line = ""
        line = f"{line}, {item}" if line else item
    return lines + [indent + line] if line else lines


def element_count(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
