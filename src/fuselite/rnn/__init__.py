"""The recurrent package: Keras / tf-keras / lingvo recurrent layers into LiteRT, along three axes.

* **cells** (``rnn/cells/``), one file per family: its gate layout, weight transforms, NumPy reference
  and the IR builder of one step (a :class:`~fuselite.rnn.cells.base.Cell`): ``lstm.py``, ``gru.py``,
  ``simple_rnn.py``, ``peephole_lstm.py``, ``conv_lstm.py``, ``lingvo.py``;
* **forms** (``rnn/forms/``), one file per way of writing the steps, each generic over the cells:
  ``fused.py`` (LiteRT's sequence ops), ``unrolled.py`` (builtins step by step), ``loop.py`` (a
  ``WHILE`` without TensorLists); ``layer.py`` (a layer's results, a Bidirectional's merge, and
  :func:`~fuselite.rnn.forms.layer.sequence`: any cell in the form asked); ``policy.py`` (which form each
  family gets: ``rnn_form``);
* **sources** (``rnn/sources/``), one file per way a layer reaches us: ``keras_layers.py`` (Keras
  layers in memory), ``tf_keras.py`` (tf-keras' composites in SavedModels), ``loops.py`` (recognised
  ``while`` loops), ``lingvo.py``; each matches and reads attributes, then hands a cell and a form to the
  same code.

Shared by all: ``kit.py`` (NumPy: gate orders and slicing, Keras -> LiteRT operands, activation
tables, the reference sequence runner) and ``build.py`` (the small IR builders: FC, binary ops,
activations, masks, steps). docs/architecture.md has the map and how to add a cell, a form or a source.

Importing the package registers the built-in recurrent fusion rules.
"""

from fuselite.rnn import sources  # noqa: F401  (register the rules)
