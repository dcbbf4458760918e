"""cascade: page a model's KV cache between the window, RAM and disk."""

__version__ = "0.1.0"
