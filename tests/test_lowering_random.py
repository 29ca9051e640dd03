"""End-to-end tests of the random-op lowering rules (``fuselite.lower.random``): each case is converted with fuselite
and run on stock LiteRT (XNNPACK and builtin kernels, ``lowering_kit.py``); the numbers differ from TF's by design,
so each case checks its shape and dtype against TF's and its distribution (a Kolmogorov-Smirnov statistic or class
frequencies of >= 10000 draws, with the bound stated), and the seeds' meaning on LiteRT is tested on its own.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter
from lowering_kit import C, F, V, check_case, missing_rules
from scipy import stats

import fuselite
from fuselite.runtime import kernel_set

# A Kolmogorov-Smirnov statistic of n draws exceeds sqrt(-ln(p / 2) / (2 n)) with probability p: at p = 1e-6 and
# n = 10000 that is 0.027 (a seeded case draws the same numbers every run; an unseeded one fails once in 10^6)
_N = 10_000
_KS_BOUND = float(np.sqrt(-np.log(1e-6 / 2) / (2 * _N)))


def ks(cdf, lo: float | None = None, hi: float | None = None):
    """The check: every output's draws (and TF's, as a control) follow ``cdf``, within ``[lo, hi]`` if given."""

    def check(got, expected):
        for g, e in zip(got, expected, strict=True):
            for sample, who in ((g, "LiteRT"), (e, "TF")):
                sample = np.asarray(sample, np.float64).reshape(-1)
                assert sample.size >= _N
                if lo is not None:
                    assert sample.min() >= lo and sample.max() <= hi, f"{who}: draws outside [{lo}, {hi}]"
                d = stats.kstest(sample, cdf).statistic
                assert d <= _KS_BOUND, f"{who}: KS statistic {d:.4f} > {_KS_BOUND:.4f}"

    return check


def frequencies(probabilities: np.ndarray, values=None):
    """The check: each row's class frequencies (of ``values``, default 0..k-1) within 5 standard deviations
    sqrt(p (1 - p) / n) of ``probabilities`` (a miss has probability < 1e-6 per class)."""

    def check(got, expected):
        for g, e in zip(got, expected, strict=True):
            for sample, who in ((g, "LiteRT"), (e, "TF")):
                rows = np.asarray(sample).reshape(len(probabilities), -1)
                n = rows.shape[1]
                assert n >= _N
                for p, row in zip(probabilities, rows, strict=True):
                    classes = np.arange(len(p)) if values is None else np.asarray(values)
                    assert np.isin(row, classes).all(), f"{who}: values outside the classes"
                    freq = np.array([(row == c).mean() for c in classes])
                    bound = 5 * np.sqrt(p * (1 - p) / n) + 1e-12
                    assert (np.abs(freq - p) <= bound).all(), f"{who}: frequencies {freq} vs {p}"

    return check


def _softmax(logits) -> np.ndarray:
    z = np.exp(np.asarray(logits, np.float64) - np.max(logits, axis=-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


_LOGITS = np.array([[0.0, 1.0, 2.0, -1.0], [3.0, 3.0, -np.inf, 0.5]], np.float32)
_Z2 = stats.norm.cdf(2.0) - stats.norm.cdf(-2.0)


def _truncated_cdf(x):
    return (stats.norm.cdf(np.clip(x, -2, 2)) - stats.norm.cdf(-2.0)) / _Z2


def _uniform_int_cdf(lo: int, hi: int):
    # the draws are integers: their CDF against a continuous uniform on [lo, hi) is compared at (value + u),
    # u = 1/2: the KS statistic of a discrete uniform read this way is at most 1 / (2 (hi - lo)) + sampling
    return lambda x: stats.uniform(lo, hi - lo).cdf(x + 0.5)


CASES = [
    # RANDOM_UNIFORM: static and dynamic shapes, seeded and unseeded, float64 / float16 through a CAST, min / max
    C("random_uniform", lambda x: tf.random.uniform(tf.shape(x), seed=7), F(100, 100),
      check=ks(stats.uniform.cdf, 0.0, 1.0), expect=["RANDOM_UNIFORM"]),
    C("random_uniform_dynamic_shape", lambda x: tf.random.uniform(tf.shape(x), seed=7),
      V(np.zeros((100, 100), np.float32), None, 100), check=ks(stats.uniform.cdf, 0.0, 1.0)),
    C("random_uniform_unseeded", lambda x: tf.raw_ops.RandomUniform(shape=tf.shape(x), dtype=tf.float32), F(100, 100),
      check=ks(stats.uniform.cdf, 0.0, 1.0)),
    C("random_uniform_float64", lambda x: tf.random.uniform(tf.shape(x), dtype=tf.float64, seed=2), F(100, 100),
      check=ks(stats.uniform.cdf, 0.0, 1.0)),
    C("random_uniform_float16", lambda x: tf.random.uniform(tf.shape(x), dtype=tf.float16, seed=2), F(100, 100),
      check=ks(stats.uniform.cdf, 0.0, 1.0)),
    C("random_uniform_range", lambda x: tf.random.uniform(tf.shape(x), -3.0, 5.0, seed=11), F(100, 100),
      check=ks(stats.uniform(-3, 8).cdf, -3.0, 5.0)),
    C("random_uniform_int64_shape", lambda x: tf.random.uniform(tf.cast(tf.shape(x), tf.int64), seed=1),
      F(100, 100), check=ks(stats.uniform.cdf, 0.0, 1.0)),
    # RANDOM_STANDARD_NORMAL: an odd count (10001) static and dynamic (drawn even, sliced), mean and stddev
    C("random_normal", lambda x: tf.random.normal(tf.shape(x), seed=3), F(100, 100), check=ks(stats.norm.cdf),
      expect=["RANDOM_STANDARD_NORMAL"], absent=["SLICE"]),
    # 10001 values: drawn as 10002 and sliced (LiteRT's kernel writes one float past an odd-sized output)
    C("random_normal_odd", lambda x: tf.random.normal(tf.shape(x), seed=3), F(73, 137), check=ks(stats.norm.cdf),
      expect=["SLICE"]),
    C("random_normal_odd_dynamic", lambda x: tf.random.normal(tf.shape(x), seed=3),
      V(np.zeros((73, 137), np.float32), None, 137), check=ks(stats.norm.cdf)),
    C("random_normal_mean_stddev", lambda x: tf.random.normal(tf.shape(x), 2.0, 3.0, seed=4), F(100, 100),
      check=ks(stats.norm(2, 3).cdf)),
    C("random_normal_float64", lambda x: tf.raw_ops.RandomStandardNormal(shape=tf.shape(x), dtype=tf.float64, seed=4),
      F(100, 100),
      check=ks(stats.norm.cdf)),
    # MULTINOMIAL: int64 (TF's default) and int32 indices, a -inf logit never drawn, logits as an input
    C("multinomial", lambda x: tf.random.categorical(x, _N, seed=5), V(_LOGITS, 2, 4),
      check=frequencies(_softmax(_LOGITS)), expect=["MULTINOMIAL"]),
    C("multinomial_int32", lambda x: tf.random.categorical(x, _N, dtype=tf.int32, seed=6), V(_LOGITS, 2, 4),
      check=frequencies(_softmax(_LOGITS))),
    C("multinomial_constant_logits", lambda x: tf.random.categorical(tf.constant(_LOGITS), _N, seed=5) + tf.cast(
        tf.reduce_sum(x) * 0, tf.int64), F(1), check=frequencies(_softmax(_LOGITS))),
    # RandomUniformInt (the official converter refuses it): int32 and int64, small and 2^31-wide ranges
    C("random_uniform_int32", lambda x: tf.random.uniform(tf.shape(x), 0, 10, dtype=tf.int32, seed=8), F(100, 100),
      check=frequencies(np.full((1, 10), 0.1), values=np.arange(10))),
    C("random_uniform_int64", lambda x: tf.random.uniform(tf.shape(x), -3, 4, dtype=tf.int64, seed=9), F(100, 100),
      check=frequencies(np.full((1, 7), 1 / 7), values=np.arange(-3, 4))),
    C("random_uniform_int32_wide", lambda x: tf.random.uniform(tf.shape(x), -2**31, 2**31 - 1, dtype=tf.int32,
                                                               seed=10), F(100, 100),
      check=ks(_uniform_int_cdf(-2**31, 2**31 - 1), -2**31, 2**31 - 2)),
    # TruncatedNormal (the official converter refuses it): N(0, 1) within (-2, 2), mean / stddev after it
    C("truncated_normal", lambda x: tf.random.truncated_normal(tf.shape(x), seed=12), F(100, 100),
      check=ks(_truncated_cdf, -2.0, 2.0)),
    C("truncated_normal_dynamic", lambda x: tf.random.truncated_normal(tf.shape(x), seed=12),
      V(np.zeros((73, 137), np.float32), None, 137), check=ks(_truncated_cdf, -2.0, 2.0)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_lowering_rule(case):
    check_case(case)


def test_every_rule_of_the_family_is_exercised():
    assert missing_rules(CASES, ["fuselite.lower.random"]) == []


def _model(seed: int | None) -> bytes:
    # None: seed = seed2 = 0 spelled out (tf.random.uniform without a seed takes the global seed when an earlier
    # test in the process set one: keras.utils.set_random_seed)
    if seed is None:
        fn = tf.function(lambda x: tf.raw_ops.RandomUniform(shape=[64], dtype=tf.float32, seed=0, seed2=0) + x)
    else:
        fn = tf.function(lambda x: tf.random.uniform([64], seed=seed) + x)
    cf = fn.get_concrete_function(tf.TensorSpec([], tf.float32))
    return fuselite.Converter.from_concrete_functions([cf]).convert()


def _invokes(model: bytes, n: int, builtin: bool) -> list[np.ndarray]:
    interp = Interpreter(model_content=model, **kernel_set(builtin))
    runner = interp.get_signature_runner()
    return [next(iter(runner(x=np.float32(0)).values())).copy() for _ in range(n)]


@pytest.mark.parametrize("builtin", [False, True], ids=["xnnpack", "builtin"])
def test_seeds_on_litert(builtin):
    # a seeded op: each invoke continues the stream (different numbers), a fresh interpreter replays it; the op's
    # (seed, seed2) are TF's as traced (seed=3 without a graph seed: TF's default graph seed, 3)
    seeded = _model(3)
    first, second = _invokes(seeded, 2, builtin)
    again = _invokes(seeded, 2, builtin)
    assert not np.array_equal(first, second)
    assert np.array_equal(first, again[0]) and np.array_equal(second, again[1])
    # unseeded (seed = seed2 = 0): a seed from /dev/urandom at each prepare, so fresh interpreters differ
    unseeded = _model(None)
    assert not np.array_equal(_invokes(unseeded, 1, builtin)[0], _invokes(unseeded, 1, builtin)[0])


@pytest.mark.parametrize("builtin", [False, True], ids=["xnnpack", "builtin"])
def test_seeded_numbers_against_tf(builtin):
    # Philox and TF's transforms: a seeded uniform / normal (an odd count, drawn even and sliced) gives TF's numbers
    # on the first invoke only (TF skips ahead per call); a seeded multinomial skips as TF does: TF's numbers each
    # time
    def f(x):
        return (tf.random.uniform([37], seed=3) + x, tf.random.normal([37], seed=4) + x,
                tf.random.categorical([[0.0, 1.0, 2.0]], 50, seed=5))

    cf = tf.function(f).get_concrete_function(tf.TensorSpec([], tf.float32))
    model = fuselite.Converter.from_concrete_functions([cf]).convert()
    runner = Interpreter(model_content=model, **kernel_set(builtin)).get_signature_runner()
    lite = [[v.copy() for _, v in sorted(runner(x=np.float32(0)).items())] for _ in range(2)]
    ours = [[t.numpy() for t in cf(tf.constant(0.0))] for _ in range(2)]
    for k in range(3):
        assert np.array_equal(lite[0][k], ours[0][k])
    assert not np.array_equal(lite[1][0], ours[1][0]) and not np.array_equal(lite[1][1], ours[1][1])
    assert np.array_equal(lite[1][2], ours[1][2])


@pytest.mark.parametrize("fn, match", [
    (lambda x: tf.random.uniform([4], 0, tf.cast(tf.reduce_sum(x), tf.int32) + 10, dtype=tf.int32, seed=1),
     "maxval must be a constant"),
    (lambda x: tf.random.uniform([4], 0, 2**40, dtype=tf.int64, seed=1), "more than 2\\^32"),
    (lambda x: tf.random.uniform([4], dtype=tf.bfloat16, seed=1), "bfloat16 is not supported"),
], ids=["uniform_int_dynamic_range", "uniform_int_wide", "uniform_bfloat16"])
def test_refused_variants_say_why(fn, match):
    cf = tf.function(fn).get_concrete_function(tf.TensorSpec([2], tf.float32))
    with pytest.raises(fuselite.ConversionError, match=match):
        fuselite.Converter.from_concrete_functions([cf]).convert()
