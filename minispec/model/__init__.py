"""The model: a Llama-family transformer in NumPy, and everything it needs to load and run.

It knows nothing of speculation. Read ``transformer.py`` first (the layers and ``Model.forward``),
then ``kvcache.py``. The rest is plumbing: ``config.py`` and ``weights.py`` read a Hugging Face
directory, ``safetensors_io.py`` the tensor file format, ``tokenizer.py`` the tokenizer,
``backend.py`` picks NumPy or CuPy, ``blas.py`` shapes small products for the CPU, ``kernel.py`` chooses the
kernel that multiplies by a weight (NumPy's BLAS, or ``numba_kernel.py``, which reads each weight once for every row,
with ``numba_layers.py``'s norms, RoPE and attention),
``q4_1.py`` the GGUF's 4-bit blocks, ``cpu.py`` names the CPU, ``tiny.py`` writes random-weight models. Fetching and converting the real target
belong to the lab (``minispec/recipes/``).

The model is the core's: it imports nothing of the lab (tests/test_layout.py).
"""

from .config import ModelConfig, ModelFormatError
from .kvcache import KVCache
from .tokenizer import Tokenizer, load_tokenizer
from .transformer import Model, load_model

__all__ = ["KVCache", "Model", "ModelConfig", "ModelFormatError", "Tokenizer", "load_model", "load_tokenizer"]
