"""Converting runs no I/O and folds within a memory budget (issue 65; docs/security.md): an op that reads or writes
files is never run at conversion (constant folding refuses it by name; the fusion check does not run a body with
one), a fold whose result passes the budget fails at once naming the op, the size and the option, and a model
LiteRT cannot allocate is never reported with an empty reason. A hostile graph that could blow up is converted in a
subprocess with a time and a memory limit."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import fuselite
from fuselite.passes.side_effects import SideEffectError, graph_state_only, outside_effect

MEMORY = 6 << 30  # bytes of address space a child converting a hostile graph may take
FUSELITE = os.path.join(os.path.dirname(sys.executable), "fuselite")
SECRET = b"fuselite-secret-3f9a1c"


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _child(code: str, cwd, timeout: int = 300) -> subprocess.CompletedProcess:
    """``code`` run by this Python in ``cwd`` under the memory limit; its last stdout line is its JSON result."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_limited, env=env)


def _result(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_deny_list():
    assert outside_effect("ReadFile") == "reads a file"
    for kind in ("WriteFile", "MatchingFiles", "ImmutableConst", "PrintV2", "SaveV2", "RestoreV2",
                 "MergeV2Checkpoints", "TextLineReaderV2", "ReaderReadV2", "TFRecordDataset", "Timestamp",
                 "DebugIdentity", "PyFuncStateless", "EagerPyFunc", "InitializeTableFromTextFileV2"):
        assert outside_effect(kind), kind
    for kind in ("MatMul", "DecodeCSV", "StringSplitV2", "Fill", "StatelessRandomUniformV2", "ConcatV2"):
        assert outside_effect(kind) is None, kind
    assert graph_state_only("ReadVariableOp", True) and graph_state_only("RandomUniform", True)
    assert not graph_state_only("WriteFile", True) and not graph_state_only("QueueDequeueV2", True)


def test_read_file_on_a_constant_path_is_refused_and_its_bytes_go_nowhere(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    path = str(secret)

    @tf.function(input_signature=[tf.TensorSpec([1], tf.float32)])
    def f(x):
        contents = tf.io.read_file(path)
        return x + tf.cast(tf.strings.length(contents), tf.float32), contents

    assert f(tf.zeros([1]))[1].numpy() == SECRET  # the control: TensorFlow reads it
    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
    with pytest.raises(SideEffectError) as e:
        conv.convert()
    message = str(e.value)
    assert "ReadFile 'ReadFile'" in message and "reads a file" in message and "test_security_io.py" in message
    assert SECRET.decode() not in message


def test_read_file_in_a_saved_model_writes_no_file(tmp_path):
    """Through the command line: the error names the op, and nothing is written."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    module = tf.Module()
    module.f = tf.function(lambda x: x + tf.cast(tf.strings.length(tf.io.read_file(str(secret))), tf.float32),
                           input_signature=[tf.TensorSpec([1], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.f)
    out = tmp_path / "out.tflite"
    proc = subprocess.run([FUSELITE, "convert", str(tmp_path / "sm"), "-o", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, preexec_fn=_limited)
    assert proc.returncode != 0 and "ReadFile" in proc.stderr and "reads a file" in proc.stderr, proc.stderr[-2000:]
    assert not out.exists() and SECRET.decode() not in proc.stderr + proc.stdout


def test_matching_files_is_refused_and_lists_nothing(tmp_path):
    (tmp_path / "private-name-7d2e.txt").write_text("x")
    pattern = str(tmp_path / "*.txt")

    @tf.function(input_signature=[tf.TensorSpec([1], tf.float32)])
    def f(x):
        names = tf.io.matching_files(pattern)
        return x + tf.cast(tf.size(names), tf.float32), names

    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
    with pytest.raises(SideEffectError, match="MatchingFiles 'MatchingFiles'.*lists files") as e:
        conv.convert()
    assert "private-name-7d2e" not in str(e.value)


def test_a_composite_that_writes_a_file_is_fused_without_running_its_body(tmp_path):
    """The fusion check runs a composite's body only when the body is pure: a WriteFile (and a tf.print to a file)
    inside is never run, and the record says why the fusion was not checked."""
    written, printed = tmp_path / "written.txt", tmp_path / "printed.txt"
    table = tf.constant(np.arange(40, dtype=np.float32).reshape(10, 4))

    @tf.function(experimental_implements="embedding_lookup")
    def lookup(params, ids):
        tf.io.write_file(str(written), "pwned")
        tf.print("pwned", output_stream=f"file://{printed}")
        return tf.gather(params, ids)

    @tf.function(input_signature=[tf.TensorSpec([3], tf.int32)])
    def f(ids):
        return lookup(table, ids)

    concrete = f.get_concrete_function()
    conv = fuselite.Converter.from_concrete_functions([concrete])
    data = conv.convert()
    assert not written.exists() and not printed.exists()
    (record,) = conv.report.composites
    assert record["status"] == "fused", record
    assert record["check"]["checked"] is False and "WriteFile" in record["check"]["why"], record["check"]
    from fuselite.runtime import run

    ids = np.array([1, 9, 0], np.int32)
    np.testing.assert_array_equal(next(iter(run(data, [ids]).values())), table.numpy()[ids])
    assert not written.exists()
    f(ids)  # the control: TensorFlow running the body does write
    assert written.read_bytes() == b"pwned"


def test_evaluate_function_refuses_an_impure_body(tmp_path):
    from fuselite.fusion.evaluate import evaluate_function, impure_nodes

    target = tmp_path / "nested.txt"

    @tf.function
    def inner(x):
        tf.io.write_file(str(target), "pwned")
        return x * 2.0

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def outer(x):
        return inner(x) + 1.0

    cf = outer.get_concrete_function()
    fdef = cf.function_def
    library = {f.signature.name: f for f in cf.graph.as_graph_def().library.function}
    found = impure_nodes(fdef, library)
    assert any("WriteFile" in p for p in found), found
    with pytest.raises(SideEffectError, match="WriteFile"):
        evaluate_function(fdef, library, [np.ones(2, np.float32)])
    assert not target.exists()


def test_a_fill_of_40_gb_fails_at_once_naming_the_op_the_size_and_the_option(tmp_path):
    """The SavedModel of issue 65: folding its Fill took 164 s and then failed with an empty reason."""
    module = tf.Module()
    module.f = tf.function(lambda x: x + tf.reduce_sum(tf.fill([100000, 100000], 1.0)),
                           input_signature=[tf.TensorSpec([1], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.f)
    out = tmp_path / "out.tflite"
    proc = subprocess.run([FUSELITE, "convert", str(tmp_path / "sm"), "-o", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, preexec_fn=_limited)
    assert proc.returncode != 0 and not out.exists()
    assert "Fill" in proc.stderr and "37.3 GiB" in proc.stderr and "--fold-memory-budget" in proc.stderr, \
        proc.stderr[-2000:]


def test_the_budget_refuses_by_default_and_the_option_raises_it(tmp_path):
    """A 324 MB intermediate (past the 256 MiB floor of a model without weights) folds once the budget allows it;
    the flag takes a size with a suffix."""
    code = """
        import json, numpy as np, tensorflow as tf, fuselite
        @tf.function(input_signature=[tf.TensorSpec([1], tf.float32)])
        def f(x):
            return x + tf.reduce_sum(tf.fill([9000, 9000], 1.0))
        cf = f.get_concrete_function()
        try:
            fuselite.Converter.from_concrete_functions([cf]).convert()
            refused = ""
        except fuselite.ConversionError as e:
            refused = str(e)
        from fuselite.options import OPTIONS
        from fuselite.options.base import flag_type
        budget = flag_type(OPTIONS["fold_memory_budget"])("512M")
        data = fuselite.Converter.from_concrete_functions([cf], fold_memory_budget=budget).convert()
        from fuselite.runtime import run
        got = float(next(iter(run(data, [np.zeros(1, np.float32)]).values()))[0])
        print(json.dumps({"refused": refused, "budget": budget, "got": got, "size": len(data)}))
    """
    result = _result(_child(code, tmp_path))
    assert "Fill" in result["refused"] and "fold_memory_budget" in result["refused"], result
    assert result["budget"] == 512 << 20
    assert result["got"] == 81e6 and result["size"] < 1 << 20  # folded: no 324 MB constant in the file


def test_a_bad_budget_is_an_input_error():
    f = tf.function(lambda x: x + 1.0, input_signature=[tf.TensorSpec([1], tf.float32)])
    with pytest.raises(fuselite.InputError, match="fold_memory_budget"):
        fuselite.Converter.from_concrete_functions([f.get_concrete_function()], fold_memory_budget=-5).convert()


def test_a_model_litert_cannot_allocate_gets_a_reason(tmp_path):
    """An input of 10^9 float32s: LiteRT's allocation fails silently under the child's memory limit; the error says
    what it could not allocate."""
    code = """
        import json, tensorflow as tf, fuselite
        @tf.function(input_signature=[tf.TensorSpec([1, 10**9], tf.float32)])
        def f(x):
            return x * 2.0
        try:
            fuselite.Converter.from_concrete_functions([f.get_concrete_function()]).convert()
            print(json.dumps({"error": None}))
        except fuselite.ConversionError as e:
            print(json.dumps({"error": str(e)}))
    """
    result = _result(_child(code, tmp_path))
    if result["error"] is None:
        pytest.skip("LiteRT allocated 8 GB under the memory limit")
    assert not result["error"].rstrip().endswith(":"), result
    assert "out of memory" in result["error"] and "'x'" in result["error"] and "3.73 GiB" in result["error"]
