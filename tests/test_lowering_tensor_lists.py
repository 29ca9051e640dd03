"""End-to-end tests of ``fuselite.lower.tensor_lists``: tensor lists outside Keras' loops (a Python loop of
``push_back``s in a ``tf.function``, a ``tf.TensorArray`` of a known size in a ``tf.while_loop`` and what is read
from it after the loop, ``resize``, ``pop_back``, ``concat``) as dense tensors, tf.function -> fuselite -> stock
LiteRT (both kernel sets) vs TF eager (``lowering_kit.py``); and the lists that have no dense form, each one
``ConversionError`` saying why.
"""

from __future__ import annotations

import pytest
import tensorflow as tf
from lowering_kit import C, Case, F, I, check_case, missing_rules
from tensorflow.python.ops import list_ops

import fuselite

F32 = tf.float32


def _pushes(shape):
    """A Python loop of push_backs onto an empty list (element shape ``shape``), stacked."""
    def f(x):
        lst = list_ops.empty_tensor_list(element_shape=shape, element_dtype=F32)
        for i in range(4):
            lst = list_ops.tensor_list_push_back(lst, x * float(i) + 1.0)
        return list_ops.tensor_list_stack(lst, F32)

    return f


def _pushes_int(x, pushes=3):
    lst = list_ops.empty_tensor_list(element_shape=[3], element_dtype=tf.int32, max_num_elements=3)
    for i in range(pushes):
        lst = list_ops.tensor_list_push_back(lst, x + i)
    return list_ops.tensor_list_stack(lst, tf.int32, num_elements=pushes)


def _list_reads(x):
    lst = list_ops.empty_tensor_list(element_shape=[2, 3], element_dtype=F32)
    lst = list_ops.tensor_list_push_back(lst, x)
    lst = list_ops.tensor_list_push_back(lst, x * 2.0)
    lst = list_ops.tensor_list_set_item(lst, 0, x + 1.0)
    return (list_ops.tensor_list_get_item(lst, 1, F32), list_ops.tensor_list_length(lst),
            list_ops.tensor_list_element_shape(lst, tf.int32), list_ops.tensor_list_stack(lst, F32))


def _set_item_dynamic_index(x, i):
    lst = list_ops.tensor_list_from_tensor(x, element_shape=[3])
    lst = list_ops.tensor_list_set_item(lst, i, x[0] * 10.0)
    return list_ops.tensor_list_stack(lst, F32), list_ops.tensor_list_get_item(lst, i, F32, element_shape=[3])


def _set_item_grows(x):
    lst = list_ops.tensor_list_from_tensor(x, element_shape=[3])
    lst = list_ops.tensor_list_set_item(lst, 4, x[1], resize_if_index_out_of_bounds=True)
    return list_ops.tensor_list_stack(lst, F32, element_shape=[3])


def _reserve_set(x):
    lst = list_ops.tensor_list_reserve(element_shape=[2, 3], num_elements=3, element_dtype=F32)
    lst = list_ops.tensor_list_set_item(lst, 1, x)
    return list_ops.tensor_list_stack(lst, F32)


def _resize(size):
    def f(x):
        lst = list_ops.tensor_list_from_tensor(x, element_shape=[3])
        lst = list_ops.tensor_list_resize(lst, size)
        return list_ops.tensor_list_stack(lst, F32, element_shape=[3]), list_ops.tensor_list_length(lst)

    return f


def _resize_empty(x):
    lst = list_ops.empty_tensor_list(element_shape=[3], element_dtype=F32)
    lst = list_ops.tensor_list_resize(lst, 2)
    lst = list_ops.tensor_list_set_item(lst, 1, x)
    return list_ops.tensor_list_stack(lst, F32, element_shape=[3])


def _pop(x):
    lst = list_ops.tensor_list_from_tensor(x, element_shape=[3])
    lst, last = list_ops.tensor_list_pop_back(lst, element_dtype=F32)
    lst = list_ops.tensor_list_push_back(lst, last * 2.0)
    return list_ops.tensor_list_stack(lst, F32, element_shape=[3]), last


def _concat(x):
    ta = tf.TensorArray(F32, size=3, element_shape=tf.TensorShape([2, 3]))
    ta = ta.write(0, x).write(1, x * 2.0).write(2, x * 3.0)
    return ta.concat()


def _concat_lengths(x):
    lst = list_ops.empty_tensor_list(element_shape=[2, 3], element_dtype=F32)
    for i in range(3):
        lst = list_ops.tensor_list_push_back(lst, x - float(i))
    joined, lengths = tf.raw_ops.TensorListConcatV2(input_handle=lst, element_shape=[2, 3], leading_dims=[],
                                                    element_dtype=F32)
    return joined, lengths


def _while_array(concat):
    """A TensorArray of a known size written in a tf.while_loop, stacked (or concatenated) after it."""
    def f(x):
        ta = tf.TensorArray(F32, size=4, element_shape=tf.TensorShape([2, 3]))

        def body(i, ta):
            return i + 1, ta.write(i, tf.sin(x) * tf.cast(i, F32))

        _, ta = tf.while_loop(lambda i, ta: i < 4, body, (0, ta))
        return (ta.concat() if concat else ta.stack()), ta.read(2), ta.gather([3, 1]), ta.size()

    return f


def _growing_array(x):
    """A dynamic-size TensorArray written in a loop of a known trip count: its length is read at run time."""
    ta = tf.TensorArray(F32, size=0, dynamic_size=True, element_shape=tf.TensorShape([2, 3]))

    def body(i, ta):
        return i + 1, ta.write(i, x + tf.cast(i, F32))

    _, ta = tf.while_loop(lambda i, ta: i < 3, body, (0, ta))
    return ta.concat(), ta.size()


def _array_reads(x):
    ta = tf.TensorArray(F32, size=3, element_shape=tf.TensorShape([3])).unstack(x)
    return ta.gather([2, 0]), ta.read(1), ta.size()


def _scatter_into(x):
    ta = tf.TensorArray(F32, size=4, element_shape=tf.TensorShape([3]))
    return ta.scatter([3, 0], x[:2]).stack()


def _scatter_new(x):
    lst = list_ops.tensor_list_scatter(x, [4, 1, 2], element_shape=[3])
    return list_ops.tensor_list_stack(lst, F32, element_shape=[3]), list_ops.tensor_list_length(lst)


def _split(x):
    ta = tf.TensorArray(F32, size=3, element_shape=tf.TensorShape([2, 3])).split(x, [2, 2, 2])
    return ta.stack(), ta.read(1)


CASES = [
    C("push_back_python_loop", _pushes([2, 3]), F(2, 3), absent=["WHILE"]),
    C("push_back_unknown_element_shape", _pushes(None), F(2, 3)),
    C("push_back_partial_element_shape", _pushes([None, 3]), F(2, 3)),
    C("push_back_int32", _pushes_int, I(3)),
    C("list_reads", _list_reads, F(2, 3), expect=["DYNAMIC_UPDATE_SLICE", "GATHER"]),
    C("set_item_dynamic_index", _set_item_dynamic_index, F(3, 3), I(lo=0, hi=3)),
    C("set_item_grows", _set_item_grows, F(3, 3)),
    C("reserve_set_item", _reserve_set, F(2, 3)),
    C("resize_grows", _resize(5), F(3, 3), expect=["CONCATENATION"]),
    C("resize_shrinks", _resize(1), F(3, 3), expect=["SLICE"]),
    C("resize_empty", _resize_empty, F(3)),
    C("pop_back", _pop, F(3, 3)),
    C("concat_tensor_array", _concat, F(2, 3)),
    C("concat_lengths", _concat_lengths, F(2, 3)),
    C("while_tensor_array_stack", _while_array(False), F(2, 3), expect=["WHILE"]),
    C("while_tensor_array_concat", _while_array(True), F(2, 3), expect=["WHILE"]),
    C("while_growing_tensor_array_concat", _growing_array, F(2, 3), expect=["WHILE"]),
    C("scatter_into_tensor_array", _scatter_into, F(3, 3), expect=["DYNAMIC_UPDATE_SLICE"]),
    C("scatter_new_list", _scatter_new, F(3, 3), expect=["DYNAMIC_UPDATE_SLICE"]),
    C("split_tensor_array", _split, F(6, 3)),
    C("tensor_array_reads", _array_reads, F(3, 3), expect=["GATHER"]),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_lowering_rule(case: Case):
    check_case(case)


def test_every_rule_of_the_family_is_exercised():
    assert missing_rules(CASES, ["fuselite.lower.tensor_lists"]) == []


def _push_in_loop(x, n):
    lst = list_ops.empty_tensor_list(element_shape=[2, 3], element_dtype=F32)

    def body(i, lst):
        return i + 1, list_ops.tensor_list_push_back(lst, x * tf.cast(i, F32))

    _, lst = tf.while_loop(lambda i, lst: i < n, body, (0, lst))
    return list_ops.tensor_list_stack(lst, F32, element_shape=[2, 3])


def _resize_to_input(x, n):
    lst = list_ops.tensor_list_resize(list_ops.tensor_list_from_tensor(x, element_shape=[3]), n)
    return list_ops.tensor_list_stack(lst, F32, element_shape=[3])


def _ragged(x):
    ta = tf.TensorArray(F32, size=2, infer_shape=False, element_shape=tf.TensorShape([None, 3]))
    return ta.write(0, x).write(1, x[:1]).concat()


def _pop_empty(x):
    lst = list_ops.empty_tensor_list(element_shape=[3], element_dtype=F32)
    _, last = list_ops.tensor_list_pop_back(lst, element_dtype=F32)
    return last + x


NO_DENSE_FORM = [
    ("push_back_in_a_loop", _push_in_loop, [tf.TensorSpec((2, 3)), tf.TensorSpec((), tf.int32)],
     "TensorListPushBack.*no dense form.*loop body grows it"),
    ("push_back_in_a_loop_of_known_trips", lambda x: _push_in_loop(x, 3), [tf.TensorSpec((2, 3))],
     "TensorListPushBack.*no dense form.*loop body grows it"),
    ("resize_to_an_input", _resize_to_input, [tf.TensorSpec((3, 3)), tf.TensorSpec((), tf.int32)],
     "TensorListResize.*new size is known only at run time"),
    ("ragged_elements", _ragged, [tf.TensorSpec((2, 3))], "element of shape \\(1, 3\\) in a list of elements of shape"),
    ("split_ragged", lambda x: tf.TensorArray(F32, size=2, infer_shape=False).split(x, [1, 2]).read(1),
     [tf.TensorSpec((3, 3))], "TensorListSplit.*elements of different lengths \\[1, 2\\]"),
    ("scatter_at_input_indices", lambda x, i: list_ops.tensor_list_stack(
        list_ops.tensor_list_scatter(x, i, element_shape=[3]), F32, element_shape=[3]),
     [tf.TensorSpec((2, 3)), tf.TensorSpec((2,), tf.int32)], "TensorListScatterV2.*indices are known only at run time"),
    ("push_past_max_num_elements", lambda x: _pushes_int(x, pushes=4), [tf.TensorSpec((3,), tf.int32)],
     "TensorListPushBack.*pushes element 4 onto a list of at most 3 \\(its max_num_elements\\)"),
    ("pop_empty", _pop_empty, [tf.TensorSpec((3,))], "TensorListPopBack.*pops an element from an empty list"),
]


@pytest.mark.parametrize("fn, specs, message", [pytest.param(*c[1:], id=c[0]) for c in NO_DENSE_FORM])
def test_a_list_without_a_dense_form_is_one_error_saying_why(fn, specs, message):
    cf = tf.function(fn, autograph=False).get_concrete_function(*specs)
    with pytest.raises(fuselite.ConversionError, match=message):
        fuselite.Converter.from_concrete_functions([cf]).convert()
