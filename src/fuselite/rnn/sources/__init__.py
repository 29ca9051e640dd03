"""The recurrent sources: the ways a recurrent layer reaches fuselite. Each only matches and reads
attributes, then hands a cell (``rnn/cells/``) and a form (``rnn/forms/``) to the same code.

* ``keras_layers.py``: Keras 3 and tf-keras layers in memory (the composites ``keras.layers.LSTM`` /
  ``GRU`` / ``SimpleRNN`` / ``Bidirectional`` / ``ConvLSTM2D`` that ``frontend/keras_rnn.py`` marks);
* ``tf_keras.py``: tf-keras' ``standard_lstm`` / ``standard_gru`` / IndyLSTM composites in SavedModels
  and concrete functions;
* ``loops.py``: Keras LSTM / SimpleRNN / GRU ``while`` loops recognised in graphs with no marker;
* ``lingvo.py``: lingvo's LSTM cells behind ``experimental_implements``.

Importing this package registers the rules of the first, second and fourth (``loops.py`` is a pass of the
pipeline).
"""

from fuselite.rnn.sources import keras_layers, lingvo, tf_keras  # noqa: F401  (register the rules)
