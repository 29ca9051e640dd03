"""tensorflow-text ops in a model: kept as the CUSTOM ops tensorflow-text's TFLite kernels run, registered on the
stock ai_edge_litert interpreter by fuselite.runtime (fuselite/runtime/text_kernels.py). Each model runs in a
subprocess (a native kernel may crash), on LiteRT with XNNPACK and on its builtin kernels alone, against
TensorFlow's own results."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tft = pytest.importorskip("tensorflow_text")
keras = pytest.importorskip("keras")

import fuselite  # noqa: E402
from fuselite.errors import ConversionError  # noqa: E402
from fuselite.testing.models import text_tokens  # noqa: E402

# empty strings, runs of spaces, a tab and a newline, a no-break space (Unicode whitespace: tensorflow-text's
# tokenizer splits there), non-ASCII words
TEXTS = np.array([b"the cat sat on the mat", b"", b"  dog\tran \n far  ", b"caf\xc3\xa9 \xc2\xa0 na\xc3\xafve", b"x"],
                 dtype=object)
VOCAB = ["the", "cat", "sat", "on", "mat", "dog", "ran", "caf\u00e9"]

_RUN = """
import pickle, sys
from fuselite.runtime import run
model, cases, builtin = pickle.load(open(sys.argv[1], "rb"))
pickle.dump([run(model, case, builtin_kernels=builtin) for case in cases], open(sys.argv[2], "wb"))
"""


def _run_isolated(data: bytes, cases: list[dict], builtin: bool, tmp_path) -> list[dict]:
    """fuselite.runtime.run of each case (inputs by name) in a subprocess."""
    (tmp_path / "in.pkl").write_bytes(pickle.dumps((data, cases, builtin)))
    out = subprocess.run([sys.executable, "-c", _RUN, str(tmp_path / "in.pkl"), str(tmp_path / "out.pkl")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return pickle.loads((tmp_path / "out.pkl").read_bytes())


def _convert(fn_or_model, **options):
    conv = fuselite.Converter.from_keras_model(fn_or_model) if isinstance(fn_or_model, keras.Model) else \
        fuselite.Converter.from_concrete_functions([fn_or_model.get_concrete_function()])
    for key, value in options.items():
        setattr(conv, key, value)
    return conv, conv.convert()


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.tolist() == want.tolist()


def test_whitespace_tokens_and_their_dense_ids_are_tensorflows_on_stock_litert(tmp_path):
    tokenizer = tft.WhitespaceTokenizer()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokens(s):
        words = tokenizer.tokenize(s)
        positions = tf.RaggedTensor.from_row_splits(tf.range(tf.size(words.flat_values, out_type=tf.int64)),
                                                    words.row_splits)
        return {"words": words.flat_values, "splits": words.row_splits,
                "dense": positions.to_tensor(default_value=-1), "fixed": positions.to_tensor(-1, shape=[None, 3])}

    conv, data = _convert(tokens)
    assert {k["custom_code"]: k["registrar"] for k in conv.report.text_kernels} == {
        "TFText>WhitespaceTokenizeWithOffsetsV2": "AddWhitespaceTokenize", "RaggedTensorToTensor": "AddRaggedTensorToTensor"}
    assert "tensorflow-text kernels" in str(conv.report)
    want = {k: v.numpy() for k, v in tokens(tf.constant(TEXTS)).items()}
    for builtin in (False, True):
        got = _run_isolated(data, [{"s": TEXTS}], builtin, tmp_path)[0]
        for key in want:
            _same(got[key], want[key])


def test_ngrams_joined_as_strings_are_tensorflows(tmp_path):
    tokenizer = tft.WhitespaceTokenizer()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def bigrams(s):
        grams = tft.ngrams(tokenizer.tokenize(s), 2, reduction_type=tft.Reduction.STRING_JOIN, string_separator="_")
        return {"grams": grams.flat_values, "splits": grams.row_splits}

    conv, data = _convert(bigrams)
    assert "TFText>NgramsStringJoin" in {k["custom_code"] for k in conv.report.text_kernels}
    want = {k: v.numpy() for k, v in bigrams(tf.constant(TEXTS)).items()}
    for builtin in (False, True):
        got = _run_isolated(data, [{"s": TEXTS}], builtin, tmp_path)[0]
        for key in want:
            _same(got[key], want[key])


def test_strings_made_dense_are_one_error_naming_the_op():
    """tensorflow-text's RaggedTensorToTensor kernel writes int32, int64 and float32 values only (its Prepare):
    dense words are refused at conversion, with the way out."""
    tokenizer = tft.WhitespaceTokenizer()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def dense_words(s):
        return tokenizer.tokenize(s).to_tensor(default_value="")

    with pytest.raises(ConversionError, match=r"RaggedTensorToTensor.*int32, int64, float32 values, not string"):
        _convert(dense_words)


@pytest.fixture(scope="module")
def text_classifier():
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(), dtype="string", name="text")
    x = keras.layers.Embedding(len(VOCAB) + 2, 8)(text_tokens(VOCAB, 6)(inputs))
    x = keras.layers.LSTM(8)(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


@pytest.mark.parametrize("mode, bound", [(None, 1e-5), ("int8", 0.05), ("int16x8", 0.01)])
def test_a_text_classifier_from_raw_strings_with_tensorflow_text(text_classifier, mode, bound, tmp_path):
    """raw strings -> tensorflow-text tokens -> table ids -> Embedding -> LSTM -> Dense, float and integer, against
    the float Keras model (the integer models keep strings and ids as they are). Measured: float 1.5e-7, int8 1.2%,
    16x8 0.39% of the output's range (both kernel sets)."""
    conv = fuselite.Converter.from_keras_model(text_classifier)
    if mode is not None:
        rng = np.random.default_rng(0)
        words = [*VOCAB, "zzz"]
        samples = [[np.array([" ".join(rng.choice(words, rng.integers(0, 9))).encode()], dtype=object)]
                   for _ in range(32)]
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = lambda: iter(samples)
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8] if mode == "int8" else \
            [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    data = conv.convert()
    assert {k["custom_code"] for k in conv.report.text_kernels} == {"TFText>WhitespaceTokenizeWithOffsetsV2",
                                                                    "RaggedTensorToTensor"}
    want = np.asarray(text_classifier(tf.constant(TEXTS)))
    for builtin in (False, True):
        # one row per invoke: the integer LSTM keeps a static batch of 1 (the report says so)
        got = _run_isolated(data, [[TEXTS[i:i + 1]] for i in range(len(TEXTS))], builtin, tmp_path)
        got = np.concatenate([next(iter(g.values())) for g in got])
        error = float(np.abs(got - want).max() / np.ptp(want))
        assert error <= bound, (mode, builtin, error)


def test_without_tensorflow_text_the_missing_kernels_say_how_to_get_them(monkeypatch):
    from fuselite.runtime import text_kernels
    from fuselite.runtime.kernel_errors import MissingKernelError

    monkeypatch.setattr(text_kernels, "_registrations",
                        lambda: text_kernels.TextKernelsUnavailable("tensorflow-text is not installed: pip install "
                                                                    "tensorflow-text"))
    codes = ["TFText>WhitespaceTokenizeWithOffsetsV2"]
    error = MissingKernelError(codes, hints=text_kernels.missing_hints(codes))
    assert "tensorflow-text op(s) with no kernel here" in str(error) and "pip install tensorflow-text" in str(error)
    assert text_kernels.text_kernel("TFText>WhitespaceTokenizeWithOffsetsV2") is None


def test_wordpiece_tokens_bert_normalization_and_detokenization_are_tensorflows(tmp_path):
    vocab = ["[UNK]", "the", "cat", "##s", "sat", "on", "mat", "caf", "##e", "dog"]
    wordpiece = tft.FastWordpieceTokenizer(vocab=vocab, token_out_type=tf.int64, support_detokenization=True)
    normalizer = tft.FastBertNormalizer(lower_case_nfd_strip_accents=True)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def pieces(s):
        ids = wordpiece.tokenize(normalizer.normalize(s))
        return {"ids": ids.flat_values, "splits": ids.row_splits, "text": wordpiece.detokenize(ids)}

    conv, data = _convert(pieces)
    assert {k["custom_code"] for k in conv.report.text_kernels} == {
        "FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "TFText>FastWordpieceDetokenize"}
    texts = np.array([b"The CATS sat", b"", b"Caf\xc3\xa9 on the mat", b"dogs"], dtype=object)
    want = {k: v.numpy() for k, v in pieces(tf.constant(texts)).items()}
    for builtin in (False, True):
        got = _run_isolated(data, [{"s": texts}], builtin, tmp_path)[0]
        for key in want:
            _same(got[key], want[key])


def test_sentencepiece_tokens_and_detokenization_are_tensorflows(tmp_path):
    """A sentencepiece model trained in-process: tokens of a batch, and the text of one row's tokens again.
    tensorflow-text's FastSentencepieceDetokenize kernel crashes the process on a batch of two rows or more (the
    official converter's file alike: measured, abort / segfault on ["the cat sat", "dogs"]), so detokenization is
    run one row at a time here."""
    import io

    spm = pytest.importorskip("sentencepiece")
    corpus = ["the cat sat on the mat", "the dog ran far away", "a cat and a dog", "cats and dogs sat together"]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus * 20), model_writer=model, vocab_size=24,
                                   model_type="unigram", minloglevel=2)
    tokenizer = tft.FastSentencepieceTokenizer(model.getvalue())

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def pieces(s):
        ids = tokenizer.tokenize(s)
        return {"ids": ids.flat_values, "splits": ids.row_splits}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(s):
        return {"text": tokenizer.detokenize(tokenizer.tokenize(s))}

    texts = np.array([b"the cat sat", b"", b"dogs ran together far", b"zebra"], dtype=object)
    for fn, cases in ((pieces, [texts]), (round_trip, [texts[i:i + 1] for i in (0, 2, 3)])):
        conv, data = _convert(fn)
        assert "TFText>FastSentencepieceTokenize" in {k["custom_code"] for k in conv.report.text_kernels}
        for builtin in (False, True):
            got = _run_isolated(data, [{"s": x} for x in cases], builtin, tmp_path)
            for x, g in zip(cases, got):
                want = {k: v.numpy() for k, v in fn(tf.constant(x)).items()}
                for key in want:
                    _same(g[key], want[key])


def _bytes(s):
    pieces = tft.ByteSplitter().split(s)
    return {"bytes": pieces.flat_values, "splits": pieces.row_splits}


def _binarized(s):
    return {"bits": tft.utf8_binarize(s, word_length=4, bits_per_char=8)}


def _sentences(s):
    found = tft.StateBasedSentenceBreaker().break_sentences(s)
    return {"sentences": found.flat_values, "splits": found.row_splits}


OTHERS = {"byte_split": (_bytes, {"TFText>ByteSplitWithOffsets"}),
          "utf8_binarize": (_binarized, {"TFText>Utf8Binarize"}),
          "sentences": (_sentences, {"SentenceFragmentsV2", "TFText>ByteSplitByOffsets"})}


@pytest.mark.parametrize("name", list(OTHERS))
def test_byte_splits_binarization_and_sentences_are_tensorflows(name, tmp_path):
    body, codes = OTHERS[name]
    fn = tf.function(body, input_signature=[tf.TensorSpec([None], tf.string)])
    conv, data = _convert(fn)
    assert {k["custom_code"] for k in conv.report.text_kernels} == codes
    texts = np.array([b"Hello there. How are you?", b"", b"caf\xc3\xa9 ok!  Fine."], dtype=object)
    want = {k: v.numpy() for k, v in fn(tf.constant(texts)).items()}
    for builtin in (False, True):
        got = _run_isolated(data, [{"s": texts}], builtin, tmp_path)[0]
        for key in want:
            _same(got[key], want[key])


# the tests above that convert each lowered tensorflow-text op (each asserts the report names it)
COVERED = {"TFText>WhitespaceTokenizeWithOffsetsV2", "RaggedTensorToTensor", "TFText>NgramsStringJoin",
           "FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "TFText>FastWordpieceDetokenize",
           "TFText>FastSentencepieceTokenize", "TFText>FastSentencepieceDetokenize"} | set().union(
               *(codes for _, codes in OTHERS.values()))


def test_every_lowered_tensorflow_text_op_has_an_end_to_end_test():
    from fuselite.lower import LOWERINGS
    from fuselite.ops.text_kernels import TEXT_KERNELS

    lowered = {code for code, kernel in TEXT_KERNELS.items() if kernel.lowered}
    assert lowered <= set(LOWERINGS) and lowered == COVERED
    assert not {code for code, kernel in TEXT_KERNELS.items() if not kernel.lowered} & set(LOWERINGS)
