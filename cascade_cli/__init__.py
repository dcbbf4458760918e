"""cascade: page a model's KV cache between the window, RAM and disk."""

import os

# The codec already spreads work over layers on its own threads; OpenBLAS's threads on top
# oversubscribe the cores (llama.cpp's spinning workers included): a 4096-token disk restore
# took 155 ms with them and 102 ms without. Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
