"""tensorflow-text's TFLite kernels: the TF ops a model keeps as LiteRT ``CUSTOM`` ops of the same name, which the
kernels tensorflow-text ships run (``tensorflow_text/core/kernels/*_tflite.cc``). An app links them and registers
each with its registrar (C++: ``tflite::ops::custom::text::<registrar>(tflite::MutableOpResolver*)``; Python:
``tensorflow_text.core.pybinds.tflite_registrar.<registrar>``); ``fuselite.runtime`` registers them on the stock
``ai_edge_litert`` interpreter itself (``fuselite/runtime/text_kernels.py``).

Each entry's key is both the TF op type and the custom code tensorflow-text registers (read from its registrars:
``AddWhitespaceTokenize`` adds ``"TFText>WhitespaceTokenizeWithOffsetsV2"``). ``values``: the value types the
kernel's ``Prepare`` takes (None: what the TF op takes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TextKernel:
    registrar: str  # the tflite_registrar function that adds it
    what: str  # what the op does, and the tensorflow-text API that writes it
    values: tuple[str, ...] | None = None  # RaggedTensorToTensor: its output's types (IsSupportedTensorType)
    lowered: bool = True  # fuselite keeps the TF op as this CUSTOM op (each has an end-to-end test); False: only
    # registered at run time (a model another converter wrote runs), the TF op is fuselite's "no lowering" error


TEXT_KERNELS: dict[str, TextKernel] = {
    "TFText>WhitespaceTokenizeWithOffsetsV2": TextKernel(
        "AddWhitespaceTokenize", "whitespace tokenization (tensorflow_text.WhitespaceTokenizer)"),
    # ragged_tensor_to_tensor_tflite.cc: Prepare takes int32, int64 and float32 outputs only
    "RaggedTensorToTensor": TextKernel(
        "AddRaggedTensorToTensor", "a ragged tensor made dense (RaggedTensor.to_tensor)",
        values=("int32", "int64", "float32")),
    "TFText>NgramsStringJoin": TextKernel("AddNgramsStringJoin", "n-grams joined as strings (tensorflow_text.ngrams)"),
    "FastBertNormalize": TextKernel("AddFastBertNormalize", "BERT text normalization (tensorflow_text.FastBertNormalizer)"),
    "FastWordpieceTokenizeWithOffsets": TextKernel(
        "AddFastWordpieceTokenize", "wordpiece tokenization (tensorflow_text.FastWordpieceTokenizer)"),
    "TFText>FastWordpieceDetokenize": TextKernel(
        "AddFastWordpieceDetokenize", "wordpiece detokenization (tensorflow_text.FastWordpieceTokenizer.detokenize)"),
    "TFText>FastSentencepieceTokenize": TextKernel(
        "AddFastSentencepieceTokenize", "sentencepiece tokenization (tensorflow_text.FastSentencepieceTokenizer)"),
    "TFText>FastSentencepieceDetokenize": TextKernel(
        "AddFastSentencepieceDetokenize", "sentencepiece detokenization (FastSentencepieceTokenizer.detokenize)"),
    "TFText>ByteSplitWithOffsets": TextKernel("AddByteSplit", "splitting strings into bytes (tensorflow_text.ByteSplitter)"),
    "TFText>ByteSplitByOffsets": TextKernel("AddByteSplitByOffsets", "byte splits at offsets (ByteSplitter.split_by_offsets)"),
    # a RoundRobinTrimmer over two tokenized rows crashed the process (segfault) in a first try: not lowered
    "TFText>RoundRobinTrim": TextKernel("AddRoundRobinTrim", "round-robin trimming (tensorflow_text.RoundRobinTrimmer)",
                                        lowered=False),
    "TFText>RoundRobinGenerateMasks": TextKernel(
        "AddRoundRobinGenerateMasks", "round-robin masks (RoundRobinTrimmer.generate_mask)", lowered=False),
    "SentenceFragmentsV2": TextKernel("AddSentenceFragmenterV2", "sentence breaking (tensorflow_text.StateBasedSentenceBreaker)"),
    "TFText>Utf8Binarize": TextKernel("AddUtf8Binarize", "UTF-8 binarization (tensorflow_text.utf8_binarize)"),
}

INSTALL = "pip install tensorflow-text (its TFLite kernels; fuselite registers them on ai_edge_litert)"
