"""What happened during a conversion, for people (``str(report)``) and machines (JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from fuselite.report_lines import element_count, gpu_lines, litert_api_lines, micro_lines, wrapped

_LISTED = 10  # frozen variables named in the text report
_SLOWEST = 4  # passes named with their time in the text report (all of them in to_json())
_INTO_LISTED = 8  # the ops a composite became, listed one by one up to this many; beyond, counted by kind


@dataclass
class Report:
    source: str = ""
    signatures: list[str] = field(default_factory=list)
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # pass name -> seconds (all its runs)
    frozen_variables: list[dict] = field(default_factory=list)
    mutable_variables: list[dict] = field(default_factory=list)  # LiteRT resource variables
    # lookup tables (passes/tables.py): {"key_dtype", "value_dtype", "size", "form"} (+ "table_id" for HASHTABLE)
    lookup_tables: list[dict] = field(default_factory=list)
    # tensorflow-text's kernels the CUSTOM ops need (ops/text_kernels.py): {"custom_code", "ops", "registrar", "what"}
    text_kernels: list[dict] = field(default_factory=list)
    composites: list[dict] = field(default_factory=list)
    # the recurrent layers' forms: {"threads", "target", "rnn_form", "reason"} (each composite's "form" says its own)
    recurrent: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # {"mode", "ops": [per-op records], "weight_bytes_before", "weight_bytes_after", "samples",
    #  "outputs": [{"name", "max_abs_error", "relative_error"}]}; empty for a float conversion
    quantization: dict = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)  # int8: {"samples", "tensors"}
    # {"target", "runs": would the model run on TFLite Micro (static check), "problems": [...], "ran": it ran on
    # TFLM's interpreter, "arena_bytes": its tensor arena as measured there, "sources": the files written}
    micro: dict = field(default_factory=dict)
    # target="ethos-u": Vela's compilation (fuselite.runtime.vela.compile_with_vela): {"accelerator", "ops",
    # "npu_ops", "cpu_ops": [{"op", "tensor", "reason"}], "cycles", "inference_ms", "sram_kib", "compiled", ...}
    ethos_u: dict = field(default_factory=dict)
    # Converter.from_causal_lm (fuselite.generative.summary): {"signatures", "cache_length", "layers", "kv_heads",
    # "head_dim", "cache_bytes_per_token", "cache_bytes", "weight_bytes", "weight_bytes_read_per_token"}
    generative: dict = field(default_factory=dict)
    # the LiteRT APIs the file loads in (stages/checks.py check_on_compiled_model): {"apis": ["Interpreter",
    # "CompiledModel"] or ["Interpreter"], "why", "variable_tensors": [...] (where CompiledModel's loader refuses
    # it), "compiled_model_error": CompiledModel's outputs against the Interpreter's, a fraction of the range}
    litert_api: dict = field(default_factory=dict)
    # LiteRT's GPU accelerator (target="gpu": fuselite.runtime.accelerators.run_on_gpu): {"ran", "fully_on_gpu",
    # "cpu_ops": [[op, reason]], "gpu_op_count", "cpu_op_count", "error", "precision": "fp16" | "fp32" (what it
    # ran at), "error_against_cpu": {output: fraction of its range}, "error_against_cpu_fp32": the same at fp32,
    # where fp16 was over the tolerance and no precision was given}; every target on LiteRT: {"predicted": would it run fully there, read from the file
    # (fuselite.runtime.gpu_rules), "problems": ["OP: reason"]}, and {"ran": False, "why"} where it could not run
    gpu: dict = field(default_factory=dict)
    # target="npu" (fuselite.runtime.npu.compile_for_npu): {"vendor", "soc", "compiled", "partitions", "npu_ops",
    # "ops", "cpu_ops": [{"op", "reason", "count"}], "error", "error_against_cpu"}
    npu: dict = field(default_factory=dict)
    # variables passed as signature inputs and outputs (target="gpu": passes/state_io.py): [{"name", "shape",
    # "dtype"}], each fed back by the app, zeros first
    state_io: list = field(default_factory=list)
    size_bytes: int = 0
    subgraphs: int = 0

    @property
    def total_seconds(self) -> float:
        return sum(self.stage_seconds.values())

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["total_seconds"] = self.total_seconds
        return d

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def to_html(self) -> str:
        """One self-contained HTML page (``fuselite.report_html``)."""
        from fuselite.report_html import render_html

        return render_html(self.to_dict())

    def summary(self) -> str:
        """The report on one screen (``fuselite convert`` prints it; ``--verbose`` prints ``str(report)``):
        ``fuselite.report_summary``."""
        from fuselite.report_summary import summary_lines

        return "\n".join(summary_lines(self))

    def __str__(self) -> str:
        lines = [f"fuselite conversion of {self.source}"]
        if self.signatures:
            lines.append(f"  signatures: {', '.join(self.signatures)} ({self.subgraphs} subgraph(s))")
        slowest = sorted(self.stage_seconds.items(), key=lambda kv: -kv[1])[:_SLOWEST]
        lines.append(f"  size: {self.size_bytes:,} bytes, time: {self.total_seconds:.2f} s "
                     f"(slowest passes: {', '.join(f'{k} {v:.2f}' for k, v in slowest)})")
        n_before, n_after = sum(self.ops_before.values()), sum(self.ops_after.values())
        lines.append(f"  TF ops: {n_before} -> LiteRT ops: {n_after}")
        for kind, n in sorted(self.ops_after.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"    {kind:<28} {n}")
        if self.frozen_variables:
            n = sum(element_count(v["shape"]) for v in self.frozen_variables)
            lines.append(f"  frozen variables: {len(self.frozen_variables)} ({n:,} values)")
            for v in self.frozen_variables[:_LISTED]:
                lines.append(f"    {_describe(v)}")
            if len(self.frozen_variables) > _LISTED:
                lines.append(f"    ... and {len(self.frozen_variables) - _LISTED} more (all in to_json())")
        if self.mutable_variables:
            lines.append(f"  mutable variables (resource variables): {len(self.mutable_variables)}")
            for v in self.mutable_variables:
                lines.append(f"    {_describe(v)}")
        if self.lookup_tables:
            lines.append(f"  lookup tables: {len(self.lookup_tables)}")
            for t in self.lookup_tables:
                how = f"HASHTABLE {t['table_id']} (imported once by an init subgraph)" if "table_id" in t else \
                    "compared key by key (LiteRT's HASHTABLE has no numeric values)"
                lines.append(f"    {t['key_dtype']} -> {t['value_dtype']}, {t['size']} entries: {how}")
        if self.text_kernels:
            lines.append(f"  tensorflow-text kernels (an app links tensorflow-text's TFLite ops and registers each; "
                         f"fuselite.runtime does): {len(self.text_kernels)}")
            for k in self.text_kernels:
                lines.append(f"    {k['custom_code']} x{k['ops']}: {k['what']}; registrar {k['registrar']}")
        checks = [c["check"] for c in self.composites if c.get("check")]
        if checks:
            done = [k for k in checks if k["checked"]]
            lines.append(f"  fusion checks: {len(done)} of {len(checks)} fusion(s) run against their composite's "
                         f"body on random arguments ({sum(k['seconds'] for k in done):.2f} s; "
                         "check_fusions=False skips them)")
        for c in self.composites:
            by = f" by rule {c['rule']}" if c.get("rule") and c["status"] == "declined" else ""
            form = f" (form: {c['form']})" if c.get("form") else ""
            head = f"  composite '{c['interface']}' ({c['call_sites']} call site(s)): "
            if c["status"] != "fused":
                lines.append(f"{head}{c['status']}{by}: {c['reason']}{form}")
            elif len(c["into"]) <= _INTO_LISTED:
                lines.append(f"{head}fused into {', '.join(c['into'])}{form}")
            else:  # an unrolled recurrent layer: hundreds of ops, counted by kind (all in to_json())
                lines.append(f"{head}fused into {len(c['into'])} ops{form}:")
                lines += wrapped([f"{k} {n}" for k, n in _by_count(c["into"])], "      ")
        if self.recurrent and any(c.get("form") for c in self.composites):
            lines.append(f"  recurrent forms: {self.recurrent['reason']}; target {self.recurrent['target']}")
        if self.generative:
            g = self.generative
            lines.append(f"  generative (LiteRT-LM): {', '.join(g['signatures'])}; KV cache {g['cache_length']} "
                         f"positions x {g['layers']} layers x {g['kv_heads']} key-value head(s) x {g['head_dim']}: "
                         f"{g['cache_bytes_per_token']:,} bytes per token, {g['cache_bytes']:,} in all; weights "
                         f"{g['weight_bytes']:,} bytes, {g['weight_bytes_read_per_token']:,} read per decoded token")
        if self.calibration:
            lines.append(f"  calibration: {self.calibration['samples']} sample(s), "
                         f"{self.calibration['tensors']} tensor range(s)")
        if self.quantization:
            lines += _quantization_lines(self.quantization)
        if self.litert_api:
            lines += litert_api_lines(self.litert_api)
        if self.gpu:
            lines += gpu_lines(self.gpu)
        if self.npu:
            n = self.npu
            left = ", ".join(f"{c['op']} x{c['count']}" for c in n.get("cpu_ops", []))
            errors = n.get("error_against_cpu") or {}
            against = (f"; outputs {100 * max(errors.values()):.2g}% of their range from the CPU's" if errors else "")
            lines.append(f"  NPU ({n['vendor']} {n['soc']}): {n.get('partitions', 0)} partition(s), "
                         f"{n.get('npu_ops', 0)} of {n.get('ops', 0)} ops offloaded"
                         f"{'; on the CPU: ' + left if left else ''}{against}")
        if self.state_io:
            lines.append("  state as signature inputs and outputs (feed each output back into the input of its name, "
                         "zeros first):")
            lines += wrapped([f"{s['name']} {s['dtype']}{s['shape']}" for s in self.state_io], "    ")
        if self.micro:
            lines += micro_lines(self.micro)
        if self.ethos_u:
            lines += ethos_u_lines(self.ethos_u)
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        return "\n".join(lines)


def ethos_u_lines(e: dict) -> list[str]:
    """The Ethos-U section of the text report: the NPU / CPU split (each CPU op with Vela's reason) and
    Vela's estimates."""
    lines = [f"  Ethos-U ({e['accelerator']}, Vela): {e['npu_ops']} of {e['ops']} op(s) on the NPU"
             + (f", {len(e['cpu_ops'])} on the CPU" if e["cpu_ops"] else " (all)")]
    for c in e["cpu_ops"]:
        lines.append(f"    CPU: {c['op']}" + (f" '{c['tensor']}'" if c.get("tensor") else "") + f": {c['reason']}")
    estimates = []
    if e.get("cycles") is not None:
        estimates.append(f"{e['cycles']:,} cycles" + (f" ({e['inference_ms']:.3g} ms at {e['clock_mhz']:.0f} MHz)"
                                                         if e.get("inference_ms") and e.get("clock_mhz") else ""))
    if e.get("sram_kib") is not None:
        estimates.append(f"SRAM {e['sram_kib']:.1f} KiB")
    if e.get("dram_kib"):
        estimates.append(f"DRAM {e['dram_kib']:.1f} KiB")
    if estimates:
        lines.append(f"    Vela's estimates ({e.get('system_config')}, {e.get('memory_mode')}): " + ", ".join(estimates))
    if e.get("compiled"):
        lines.append("    kept: " + ", ".join(e["compiled"]))
    return lines


def _quantization_lines(q: dict) -> list[str]:
    before, after = q.get("weight_bytes_before", 0), q.get("weight_bytes_after", 0)
    lines = [f"  quantization: {q['mode']}, weights {before:,} -> {after:,} bytes, {len(q.get('ops', []))} op(s)"]
    for rec in q.get("ops", [])[:_LISTED]:
        how = rec.get("scheme") or rec.get("reason") or ""
        err = rec.get("output_error")
        err = f"  output err {100 * err['relative_error']:.2g}%" if err else ""
        lines.append(f"    {rec['kind']:<28} {rec['mode']:<12} {rec['weight_bytes_before']:>10,} -> "
                     f"{rec['weight_bytes_after']:>10,} bytes{err}  {rec['op']}{'  (' + how + ')' if how else ''}")
    if len(q.get("ops", [])) > _LISTED:
        lines.append(f"    ... and {len(q['ops']) - _LISTED} more (all in to_json())")
    for out in q.get("outputs", []):
        lines.append(f"    error of output '{out['name']}'"
                     + (f" of signature '{q['signature']}'" if q.get("signature") else "")
                     + f" against the float model on {q.get('runtime', 'LiteRT')} "
                     f"({q.get('samples', 0)} samples): max abs {out['max_abs_error']:.3g}, "
                     f"{100 * out['relative_error']:.3g}% of its range")
    layers = q.get("layers")
    if layers and layers["layers"]:
        top = sorted(layers["layers"], key=lambda k: -k["share"])[:_SHARES]
        lines.append("    largest shares of the error (each layer quantized wider, measured): " + ", ".join(
            f"{k['layer']} {100 * k['share']:.0f}%" for k in top))
    if layers and layers.get("layers_not_measured"):
        lines.append(f"    {layers['layers_not_measured']} layer(s) not measured one by one (more than 32, or past "
                     f"the time limit of {layers.get('time_limit_seconds', 0):.3g} s: the conversion's own time)")
    for trial in (layers or {}).get("trials_not_run", []):
        lines.append(f"    error share of {trial['layer']} not measured: its trial model did not run ({trial['reason']})")
    if layers and "max_relative_error" in layers:
        how = (f"met with {', '.join(layers['promoted'])} wider" if layers["promoted"] else "met as it is") \
            if layers["met"] else f"not met with every candidate layer wider ({', '.join(layers['promoted'])})"
        before, after = layers["end_to_end_error"], layers["final_error"]
        lines.append(f"    error budget {100 * layers['max_relative_error']:.3g}%: {how}; "
                     f"{_percent(before)} -> {_percent(after)}")
    return lines


def _by_count(kinds: list[str]) -> list[tuple[str, int]]:
    """Each op kind with how many times it occurs, most frequent first (then by name)."""
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _percent(x: float | None) -> str:
    return "not measured" if x is None else f"{100 * x:.3g}%"


_SHARES = 5


def _describe(v: dict) -> str:
    return f"{v['name']}: {v['dtype']}[{', '.join(str(d) for d in v['shape'])}]"


