"""TensorFlow programs -> fuselite IR."""

from fuselite.frontend.sources import concrete_function_entries, keras_entries, saved_model_entries
from fuselite.frontend.tf_graph import import_concrete_functions

__all__ = ["concrete_function_entries", "import_concrete_functions", "keras_entries", "saved_model_entries"]
