"""Generative decoders (issue 47): keras-hub CausalLMs (tiny configs, random weights) as LiteRT-LM's prefill /
decode signatures, run on stock LiteRT against Keras, and as ``.litertlm`` bundles run by LiteRT-LM's own
runtime (in a subprocess: a native runtime's crash is a failure, not a lost run)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import keras_hub  # a test dependency (pyproject's test extras)
import numpy as np
import pytest
from conftest import litert_op_names

import fuselite
from fuselite.errors import InputError
from fuselite.frontend.causal_lm import cache_names, cache_shape
from fuselite.generative.run import greedy_tokens
from fuselite.runtime import run

TOL = 1e-4  # of the logits' range
CACHE = 96
WORDS = "the cat sat on a mat and the dog ran to the red ball while birds sang in green trees".split()


def _corpus(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, 12)) for _ in range(n)]


def _sentencepiece_proto(**special) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(_corpus()), model_writer=buf, vocab_size=64,
                                   model_type="bpe", character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
                                   **special)
    return buf.getvalue()


def sentencepiece_tokenizer():
    """A SentencePiece BPE model trained in-process (Gemma's special ids: pad 0, eos 1, bos 2, unk 3)."""
    return keras_hub.models.GemmaTokenizer(proto=_sentencepiece_proto(
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>"))


def llama_tokenizer():
    """A SentencePiece BPE model trained in-process with Llama's special pieces (unk 0, <s> 1, </s> 2)."""
    return keras_hub.models.LlamaTokenizer(proto=_sentencepiece_proto(
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>"))


def gpt2_tokenizer():
    """A byte-level BPE as GPT-2's: the 256 byte symbols, one merge chain per word of the corpus, <|endoftext|>."""
    from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

    _, symbols = bytes_to_unicode()
    vocabulary = {s: i for i, s in enumerate(symbols)}
    merges = []
    for word in sorted(set(WORDS)):
        piece = "Ġ"
        for ch in word:
            merge = f"{piece} {ch}"
            piece += ch
            if piece not in vocabulary:
                merges.append(merge)
                vocabulary[piece] = len(vocabulary)
    vocabulary["<|endoftext|>"] = len(vocabulary)
    return keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)


def build(family: str, tokenizer=None):
    import keras

    keras.utils.set_random_seed(0)
    vocab = tokenizer.vocabulary_size() if tokenizer is not None else 64
    models = keras_hub.models
    if family == "gpt2":
        backbone = models.GPT2Backbone(vocabulary_size=vocab, num_layers=2, num_heads=2, hidden_dim=16,
                                       intermediate_dim=32, max_sequence_length=CACHE)
        pre = models.GPT2CausalLMPreprocessor(tokenizer, sequence_length=CACHE) if tokenizer else None
        return models.GPT2CausalLM(backbone=backbone, preprocessor=pre)
    if family == "gemma":
        backbone = models.GemmaBackbone(vocabulary_size=vocab, num_layers=2, num_query_heads=4, num_key_value_heads=2,
                                        hidden_dim=16, intermediate_dim=32, head_dim=8)
        pre = models.GemmaCausalLMPreprocessor(tokenizer, sequence_length=CACHE) if tokenizer else None
        return models.GemmaCausalLM(backbone=backbone, preprocessor=pre)
    if family == "gemma3":  # text only, sliding-window layers, query-key norm
        backbone = models.Gemma3Backbone(vocabulary_size=vocab, image_size=16, num_layers=2, num_query_heads=2,
                                         num_key_value_heads=1, hidden_dim=16, intermediate_dim=32, head_dim=8,
                                         vision_encoder=None, use_sliding_window_attention=True,
                                         sliding_window_size=8)
        return models.Gemma3CausalLM(backbone=backbone, preprocessor=None)
    backbone = models.LlamaBackbone(vocabulary_size=vocab, num_layers=2, num_query_heads=4, num_key_value_heads=2,
                                    hidden_dim=16, intermediate_dim=32)  # grouped-query attention
    pre = models.LlamaCausalLMPreprocessor(tokenizer, sequence_length=CACHE) if tokenizer else None
    return models.LlamaCausalLM(backbone=backbone, preprocessor=pre)


FAMILIES = ["gpt2", "gemma", "gemma3", "llama"]
KV = {"gpt2": (2, 8), "gemma": (2, 8), "gemma3": (1, 8), "llama": (2, 4)}  # key-value heads, head size


@pytest.fixture(scope="module", params=FAMILIES)
def converted(request):
    lm = build(request.param)
    conv = fuselite.Converter.from_causal_lm(lm, prefill_lengths=[3, 7], cache_length=CACHE, prefill_logits=True)
    return request.param, lm, conv.convert()


def _keras_logits(lm, tokens):
    return lm({"token_ids": tokens, "padding_mask": np.ones_like(tokens)}).numpy()


def test_signatures_names_and_shared_weights(converted):
    """LiteRT-LM's names: prefill_<L> and decode; tokens / input_pos / kv_cache_{k,v}_N in, the caches (and logits)
    out; keys [1, heads, length, size], values [1, heads, size, length]; each weight stored once for all
    signatures (one buffer, read by all)."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.interpreter import Interpreter

    family, lm, data = converted
    sigs = Interpreter(model_content=data).get_signature_list()
    assert sorted(sigs) == ["decode", "prefill_3", "prefill_7"], sigs
    names = cache_names(2)
    for key, sig in sigs.items():
        assert sorted(sig["inputs"]) == sorted(["tokens", "input_pos", *names]), (key, sig)
        assert sorted(sig["outputs"]) == sorted(["logits", *names]), (key, sig)
    runner = Interpreter(model_content=data).get_signature_runner("decode")
    for name in names:
        assert tuple(runner.get_input_details()[name]["shape"]) == cache_shape(name, CACHE, *KV[family])
    m = schema.Model.GetRootAs(data, 0)
    readers = {}  # buffer -> the signatures' subgraphs reading it
    for s in range(m.SubgraphsLength()):
        g = m.Subgraphs(s)
        for i in range(g.TensorsLength()):
            readers.setdefault(g.Tensors(i).Buffer(), set()).add(s)
    large = [i for i in range(m.BuffersLength()) if m.Buffers(i).DataLength() >= 1024]
    contents = [m.Buffers(i).DataAsNumpy().tobytes() for i in large]
    assert len(set(contents)) == len(contents)  # each weight once
    assert all(readers[i] == set(range(m.SubgraphsLength())) for i in large), family  # read by every signature
    assert "DYNAMIC_UPDATE_SLICE" in litert_op_names(data)


def cache_copies(data: bytes, shape) -> list[tuple[str, str]]:
    """(signature, op) of every op but a DYNAMIC_UPDATE_SLICE whose result has a cache's size (``shape`` in any
    layout): a copy of a cache."""
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in schema.BuiltinOperator.__dict__.items() if not k.startswith("_")}
    m = schema.Model.GetRootAs(data, 0)
    copies = []
    for s in range(m.SubgraphsLength()):
        g = m.Subgraphs(s)
        sized = {i for i in range(g.TensorsLength()) if sorted(g.Tensors(i).ShapeAsNumpy()) == sorted(shape)}
        for j in range(g.OperatorsLength()):
            code = m.OperatorCodes(g.Operators(j).OpcodeIndex())
            kind = names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]
            if kind != "DYNAMIC_UPDATE_SLICE" and set(g.Operators(j).OutputsAsNumpy()) & sized:
                copies.append((g.Name().decode(), kind))
    return copies


def test_no_copy_of_a_cache(converted):
    """No op but the cache's own DYNAMIC_UPDATE_SLICE writes a tensor of a cache's size (no TRANSPOSE, PACK or
    slice of one, no TILE: Llama's repeat of its keys and values for grouped-query attention is a grouped
    matmul, passes/grouped_attention.py): each call reads the caches once and writes the new tokens' entries."""
    family, lm, data = converted
    assert not cache_copies(data, cache_shape("kv_cache_k_0", CACHE, *KV[family])), family


@pytest.mark.parametrize("builtin", [False, True], ids=["xnnpack", "builtin"])
def test_prefill_then_decode_give_keras_logits(converted, builtin):
    """A prompt of 6 through prefill_7 (padded), then 6 decode steps, each step's logits against Keras' forward
    pass over the whole sequence: within 1e-4 of the logits' range (measured 1e-7 to 4e-7)."""
    family, lm, data = converted
    rng = np.random.default_rng(1)
    full = rng.integers(4, 64, (1, 12)).astype(np.int32)
    want = _keras_logits(lm, full)
    caches = {n: np.zeros(cache_shape(n, CACHE, *KV[family]), np.float32) for n in cache_names(2)}
    tokens = np.zeros((1, 7), np.int32)
    tokens[0, :6] = full[0, :6]
    feeds = {"tokens": tokens, "input_pos": np.array([0, 1, 2, 3, 4, 5, 0], np.int32), **caches}
    out = run(data, feeds, "prefill_7", builtin_kernels=builtin)
    errors = [np.abs(out["logits"][:, :6] - want[:, :6]).max()]
    for p in range(6, 12):
        feeds = {"tokens": full[:, p:p + 1], "input_pos": np.array([p], np.int32),
                 **{n: out[n] for n in cache_names(2)}}
        out = run(data, feeds, "decode", builtin_kernels=builtin)
        errors.append(np.abs(out["logits"][:, 0] - want[:, p]).max())
    assert max(errors) <= TOL * np.ptp(want), (family, errors)


def test_64_greedy_tokens_are_generates(converted):
    """keras-hub's generate() with its greedy sampler and the same loop on LiteRT (prefill_7 then decode, as
    LiteRT-LM drives it): the same 64 tokens after a 5-token prompt."""
    family, lm, data = converted
    lm.compile(sampler="greedy")
    prompt = np.array([5, 9, 17, 33, 12], np.int32)
    tokens = np.zeros((1, prompt.size + 64), np.int32)
    tokens[0, :prompt.size] = prompt
    mask = np.zeros_like(tokens, bool)
    mask[0, :prompt.size] = True
    if family == "gemma3":  # its generate() takes no token ids without a Gemma 3 preprocessor: the same greedy
        want = list(prompt)  # choice from Keras' forward pass over the whole sequence, token by token
        for _ in range(64):
            want.append(int(np.argmax(_keras_logits(lm, np.array([want], np.int32))[0, -1])))
        want = np.array([want])
    else:
        want = np.asarray(lm.generate({"token_ids": tokens, "padding_mask": mask}, stop_token_ids=None)["token_ids"])
    got = greedy_tokens(data, prompt, 64)
    assert got == want[0, prompt.size:].tolist(), family


def test_from_causal_lm_refuses_what_it_cannot_convert():
    lm = build("gpt2")
    with pytest.raises(InputError, match="does not fit a cache"):
        fuselite.Converter.from_causal_lm(lm, prefill_lengths=[64], cache_length=32)
    with pytest.raises(InputError, match="max_sequence_length"):
        fuselite.Converter.from_causal_lm(lm, prefill_lengths=[8], cache_length=4 * CACHE)
    with pytest.raises(InputError, match="positive number of tokens"):
        fuselite.Converter.from_causal_lm(lm, prefill_lengths=[0], cache_length=32)
    with pytest.raises(InputError, match="not a keras-hub CausalLM"):
        fuselite.Converter.from_causal_lm(lm.backbone, prefill_lengths=[8], cache_length=32)


_RUN_BUNDLE = """
import json, sys
import fuselite
text, stats = fuselite.generate(sys.argv[1], sys.argv[2], max_new_tokens=int(sys.argv[3]))
print(json.dumps({"text": text, "stats": stats}))
"""


def _generate_in_subprocess(path, prompt, n):
    proc = subprocess.run([sys.executable, "-c", _RUN_BUNDLE, str(path), prompt, str(n)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("family", ["gemma", "gpt2", "llama"])
def test_litertlm_bundle_generates_keras_text(family, tmp_path):
    """The bundle (model, tokenizer: SentencePiece for Gemma and Llama, GPT-2's byte-level BPE as tokenizer.json,
    start / stop tokens) run by LiteRT-LM's own runtime (litert-lm-api, CPU, greedy): the text keras-hub's
    generate() writes after the same prompt, 64 tokens."""
    tokenizer = {"gemma": sentencepiece_tokenizer, "gpt2": gpt2_tokenizer, "llama": llama_tokenizer}[family]()
    lm = build(family, tokenizer)
    lm.compile(sampler="greedy")
    prompt = "the cat sat on"
    data = fuselite.Converter.from_causal_lm(lm, prefill_lengths=[8, 16], cache_length=CACHE).convert()
    written = fuselite.write_litertlm(data, tmp_path / "model.litertlm", lm.preprocessor.tokenizer)
    assert written["max_num_tokens"] == CACHE
    assert written["tokenizer"] == ("hf" if family == "gpt2" else "sentencepiece")
    n_prompt = int(np.asarray(lm.preprocessor.generate_preprocess([prompt])["padding_mask"]).sum())  # the start too
    want = lm.generate(prompt, max_length=n_prompt + 64, strip_prompt=True)
    got = _generate_in_subprocess(tmp_path / "model.litertlm", prompt, 64)
    assert got["text"] == want, (family, got["text"], want)
    assert got["stats"]["decode_tokens"] >= 1


def test_write_litertlm_refuses_a_model_litert_lm_cannot_run(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    data = fuselite.Converter.from_keras_model(model).convert()
    with pytest.raises(InputError, match="not a prefill / decode model"):
        fuselite.write_litertlm(data, tmp_path / "m.litertlm", sentencepiece_tokenizer())
    assert not os.listdir(tmp_path)


def test_cli_convert_lm_then_generate(tmp_path):
    """``fuselite convert-lm lm.keras -o lm.litertlm`` (int8 weights) and ``fuselite generate``: the report gives
    the signatures, the cache per token and the weight bytes; the bundle generates on LiteRT-LM's runtime; a
    model that is not a CausalLM is refused in one line (exit 1)."""
    lm = build("gemma", sentencepiece_tokenizer())
    lm.save(tmp_path / "lm.keras")
    cli = [sys.executable, "-m", "fuselite.cli"]
    proc = subprocess.run([*cli, "convert-lm", str(tmp_path / "lm.keras"), "-o", str(tmp_path / "lm.litertlm"),
                           "--prefill", "8,16", "--cache-length", str(CACHE), "--weights", "int8", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    g = out["report"]["generative"]
    assert g["signatures"] == ["prefill_8", "prefill_16", "decode"]
    assert g["cache_bytes_per_token"] == 2 * 2 * 2 * 8 * 4 and g["cache_bytes"] == g["cache_bytes_per_token"] * CACHE
    q = out["report"]["quantization"]
    assert q["mode"] == "dynamic" and q["weight_bytes_after"] < q["weight_bytes_before"], q
    assert any(op["mode"] == "int8 weights" and op["kind"] == "EMBEDDING_LOOKUP" for op in q["ops"])
    assert g["weight_bytes"] > 0
    proc = subprocess.run([*cli, "generate", str(tmp_path / "lm.litertlm"), "the cat sat", "--max-new-tokens", "8",
                           "--json"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})  # (not the user's cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1])
    assert result["decode_tokens"] >= 1 and result["text"]
    import keras

    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    plain.save(tmp_path / "plain.keras")
    proc = subprocess.run([*cli, "convert-lm", str(tmp_path / "plain.keras"), "-o", str(tmp_path / "p.litertlm")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "not a keras-hub CausalLM" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "p.litertlm").exists()


def _attention_step(length: int, heads: int = 2, size: int = 3, cache: int = 16):
    """A hand-written one-layer decoder step in LiteRT-LM's layout (keys [1, heads, cache, size], values [1, heads,
    size, cache]), the cache written with XLA's dynamic_update_slice: the pattern a user's own tf.function
    follows."""
    import tensorflow as tf
    from tensorflow.compiler.tf2xla.python import xla

    rng = np.random.default_rng(3)
    embed = tf.constant(rng.normal(size=(32, heads * size)).astype(np.float32))
    wq, wk, wv = (tf.constant(rng.normal(size=(heads * size, heads * size)).astype(np.float32) / 3) for _ in "qkv")

    @tf.function(input_signature=[tf.TensorSpec((1, length), tf.int32, name="tokens"),
                                  tf.TensorSpec((length,), tf.int32, name="input_pos"),
                                  tf.TensorSpec((1, heads, cache, size), tf.float32, name="kv_cache_k_0"),
                                  tf.TensorSpec((1, heads, size, cache), tf.float32, name="kv_cache_v_0")])
    def step(tokens, input_pos, k_cache, v_cache):
        x = tf.gather(embed, tokens)  # [1, T, E]
        split = lambda w: tf.transpose(tf.reshape(x @ w, (1, length, heads, size)), (0, 2, 1, 3))  # noqa: E731
        q, k, v = split(wq), split(wk), split(wv)
        zero = tf.constant(0, tf.int32)
        k_cache = xla.dynamic_update_slice(k_cache, k, tf.stack([zero, zero, input_pos[0], zero]))
        v_cache = xla.dynamic_update_slice(v_cache, tf.transpose(v, (0, 1, 3, 2)),
                                           tf.stack([zero, zero, zero, input_pos[0]]))
        scores = tf.matmul(q, k_cache, transpose_b=True) / size ** 0.5  # [1, H, T, cache]
        allowed = tf.range(cache)[None, :] <= input_pos[:, None]
        scores = tf.where(allowed[None, None], scores, -1e9)
        out = tf.matmul(tf.nn.softmax(scores), tf.transpose(v_cache, (0, 1, 3, 2)))  # values read [H, cache, size]
        logits = tf.reshape(tf.transpose(out, (0, 2, 1, 3)), (1, length, heads * size)) @ tf.transpose(embed)
        return {"logits": logits, "kv_cache_k_0": k_cache, "kv_cache_v_0": v_cache}

    return step


def test_plain_tf_functions_in_litert_lm_layout():
    """from_concrete_functions({"prefill_4": ..., "decode": ...}) names the signatures; the values' transpose is
    BATCH_MATMUL's adj_y (no copy of the cache), the cache written in place; logits and caches match TF through a
    prefill and three decode steps, on both kernel sets (within 1e-5 of their range)."""
    prefill, decode = _attention_step(4), _attention_step(1)
    conv = fuselite.Converter.from_concrete_functions({"prefill_4": prefill.get_concrete_function(),
                                                       "decode": decode.get_concrete_function()})
    data = conv.convert()
    from ai_edge_litert.interpreter import Interpreter

    assert sorted(Interpreter(model_content=data).get_signature_list()) == ["decode", "prefill_4"]
    assert not cache_copies(data, (1, 2, 16, 3))
    from fuselite.generative.bundle import decode_cache_length

    assert decode_cache_length(data) == 16
    for builtin in (False, True):
        k, v = np.zeros((1, 2, 16, 3), np.float32), np.zeros((1, 2, 3, 16), np.float32)
        steps = [(prefill, "prefill_4", np.array([[3, 7, 1, 9]], np.int32), np.arange(4, dtype=np.int32))]
        steps += [(decode, "decode", np.array([[t]], np.int32), np.array([p], np.int32)) for p, t in
                  ((4, 11), (5, 2), (6, 30))]
        for fn, key, tokens, positions in steps:
            want = {n: t.numpy() for n, t in fn(tokens, positions, k, v).items()}
            got = run(data, {"tokens": tokens, "input_pos": positions, "kv_cache_k_0": k, "kv_cache_v_0": v}, key,
                      builtin_kernels=builtin)
            for name, value in want.items():
                assert np.abs(got[name] - value).max() <= 1e-5 * max(np.ptp(value), 1e-6), (key, name, builtin)
            k, v = want["kv_cache_k_0"], want["kv_cache_v_0"]


def test_slices_of_a_stack_read_its_operands():
    """tf.stack([a, b], axis=1)[:, 1, ...] (and [:, 0]) is its operand: no PACK and no STRIDED_SLICE left, the
    numbers TF's."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec((2, 3, 4), tf.float32), tf.TensorSpec((2, 3, 4), tf.float32)])
    def fn(a, b):
        both = tf.stack([a, b], axis=1)
        return {"y": both[:, 1, ...] * 2.0 + both[:, 0]}

    data = fuselite.Converter.from_concrete_functions([fn.get_concrete_function()]).convert()
    ops = litert_op_names(data)
    assert "PACK" not in ops and "STRIDED_SLICE" not in ops, ops
    a, b = np.random.default_rng(0).normal(size=(2, 2, 3, 4)).astype(np.float32)
    assert np.allclose(run(data, {"a": a, "b": b})["y"], fn(a, b)["y"].numpy(), atol=1e-6)


def test_signatures_fold_a_shared_weight_once():
    """Two signatures that transpose the same large weight (1 MiB and more) share one folded array
    (passes/fold_tf.FoldMemo): a 1B-parameter decoder's prefill and decode do not hold a copy each."""
    import tensorflow as tf

    from fuselite.frontend import concrete_function_entries, import_concrete_functions
    from fuselite.passes.fold_tf import fold_tf
    from fuselite.passes.inline import inline_calls
    from fuselite.passes.variables import freeze_variables

    w = tf.Variable(np.random.default_rng(0).normal(size=(512, 1024)).astype(np.float32))

    def fn(n):
        @tf.function(input_signature=[tf.TensorSpec((n, 1024), tf.float32)])
        def f(x):
            return {"y": tf.matmul(x, tf.transpose(w))}
        return f.get_concrete_function()

    module = import_concrete_functions(concrete_function_entries({"prefill_4": fn(4), "decode": fn(1)}))
    inline_calls(module)
    freeze_variables(module)
    fold_tf(module)
    folded = [v.const for f in module.functions.values() for op in f.ops for v in op.inputs
              if v is not None and v.const is not None and v.const.shape == (1024, 512)]
    assert len(folded) == 2 and folded[0] is folded[1]


def test_int4_decoder_on_stock_litert_and_litert_lm(tmp_path):
    """A Gemma of hidden size 32 with blockwise int4 weights (block 32): every FULLY_CONNECTED weight of 1024
    elements is int4 (the embedding int8); decode on both kernel sets gives Keras' logits within int4's error on
    random weights (bound 15% of the range, measured 10.1%), the two sets within 2% of each other (measured 0.46%:
    the same int4 weights; the inputs the kernels quantize per row round apart where float sums differ in the
    last bit); the bundle run by LiteRT-LM's runtime writes the text the same greedy loop on stock LiteRT does."""
    import keras

    tokenizer = sentencepiece_tokenizer()
    keras.utils.set_random_seed(0)
    models = keras_hub.models
    backbone = models.GemmaBackbone(vocabulary_size=tokenizer.vocabulary_size(), num_layers=2, num_query_heads=4,
                                    num_key_value_heads=2, hidden_dim=32, intermediate_dim=64, head_dim=8)
    lm = models.GemmaCausalLM(backbone=backbone, preprocessor=models.GemmaCausalLMPreprocessor(tokenizer, CACHE))
    conv = fuselite.Converter.from_causal_lm(lm, prefill_lengths=[8], cache_length=CACHE)
    conv.optimizations, conv.target_spec.supported_types = ["DEFAULT"], ["int4"]
    data = conv.convert()
    ops = conv.report.quantization["ops"]
    assert conv.report.quantization["mode"] == "int4"
    decode = [o["op"].split("/")[-2] for o in ops if o["function"] == "decode" and o["mode"] == "int4 weights"]
    assert len(decode) == 2 * 5 + 1, decode  # query, output, gating (2), linear of each layer; the tied head
    assert all(o["mode"] != "int8 weights" or "not int4" in o["scheme"] for o in ops)
    assert conv.report.generative["weight_bytes"] < 0.3 * 4 * lm.count_params()
    q = conv.report.quantization  # measured on decode (one token: a prefill costs L tokens' work)
    assert q["signature"] == "decode" and "logits" in [o["name"] for o in q["outputs"]], q["outputs"]
    rng = np.random.default_rng(3)
    full = rng.integers(4, tokenizer.vocabulary_size(), (1, 10)).astype(np.int32)
    want = _keras_logits(lm, full)
    results = []
    for builtin in (False, True):
        caches = {n: np.zeros(cache_shape(n, CACHE, 2, 8), np.float32) for n in cache_names(2)}
        logits = []
        for p in range(10):
            out = run(data, {"tokens": full[:, p:p + 1], "input_pos": np.array([p], np.int32), **caches}, "decode",
                      builtin_kernels=builtin)
            caches = {n: out[n] for n in caches}
            logits.append(out["logits"][0, 0])
        results.append(np.array(logits))
    errors = [np.abs(r - want[0]).max() / np.ptp(want) for r in results]
    between = np.abs(results[0] - results[1]).max() / np.ptp(want)
    assert max(errors) <= 0.15 and between <= 0.02, (errors, between)
    fuselite.write_litertlm(data, tmp_path / "int4.litertlm", tokenizer)
    prompt = "the cat sat on"
    ids = [2] + [int(t) for t in np.asarray(tokenizer(prompt))]  # the start token first, as LiteRT-LM's session
    stock = tokenizer.detokenize(np.array(greedy_tokens(data, np.array(ids, np.int32), 32)))
    got = _generate_in_subprocess(tmp_path / "int4.litertlm", prompt, 32)
    assert got["text"] == stock, (got["text"], stock)


def test_keras_quantized_decoders_keep_int8_or_are_refused():
    """Keras' own ``quantize("int8")`` on a Llama (EinsumDense, ReversibleEmbedding): its int8 kernels stay int8 in
    the file and decode gives the quantized Keras model's logits (its in-graph activation rounding reproduced;
    bound 1e-4 of the range). ``quantize("int4")`` on EinsumDense has no exact LiteRT form here: refused, naming
    the layer (never float32 weights in silence)."""
    import keras
    from ai_edge_litert import schema_py_generated as schema

    from fuselite.frontend.keras_quantized import UnsupportedKerasQuantization

    lm = build("llama")
    lm.quantize("int8")
    data = fuselite.Converter.from_causal_lm(lm, prefill_lengths=[4], cache_length=CACHE).convert()
    m = schema.Model.GetRootAs(data, 0)
    tensors = [m.Subgraphs(s).Tensors(i) for s in range(m.SubgraphsLength())
               for i in range(m.Subgraphs(s).TensorsLength())]
    int8 = {t.Buffer() for t in tensors if t.Type() == schema.TensorType.INT8 and m.Buffers(t.Buffer()).DataLength()}
    kernels = {np.asarray(w).tobytes() for w in lm.weights if w.dtype == "int8"}  # keras-hub's random init
    assert len(int8) >= len(kernels) > 0, (len(int8), len(kernels))  # gives some kernels equal values: one buffer
    full = np.random.default_rng(4).integers(4, 64, (1, 6)).astype(np.int32)
    want = _keras_logits(lm, full)
    caches = {n: np.zeros(cache_shape(n, CACHE, *KV["llama"]), np.float32) for n in cache_names(2)}
    errors = []
    for p in range(6):
        out = run(data, {"tokens": full[:, p:p + 1], "input_pos": np.array([p], np.int32), **caches}, "decode")
        caches = {n: out[n] for n in caches}
        errors.append(np.abs(out["logits"][0, 0] - want[0, p]).max())
    assert max(errors) <= TOL * np.ptp(want), errors
    keras.utils.set_random_seed(0)
    lm4 = build("llama")
    lm4.quantize("int4")
    with pytest.raises(UnsupportedKerasQuantization, match=r"\(EinsumDense\) is quantized as 'int4'.*"
                                                           r"supported_types=\['int4'\]"):
        fuselite.Converter.from_causal_lm(lm4, prefill_lengths=[4], cache_length=CACHE).convert()
