"""A small model library with the graph breaks GraphMend's paper finds in Hugging Face models (transformers 4.52):
a logger call in a forward (T5's legacy-cache warning), a longrope-style data-dependent branch in a nested function
of a decorator (``modeling_rope_utils.dynamic_rope_update``), a validation guard that raises, and an ``.item()``
read. tracecheck's tests install it as a real distribution (under site-packages) and fix its breaks from the
user's side; nothing here is ever edited."""
from .layers import Block, TinyModel  # noqa: F401
from .rope import RotaryEmbedding, dynamic_rope_update  # noqa: F401

__version__ = "0.3.0"
