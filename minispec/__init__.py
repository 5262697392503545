"""minispec: speculative decoding in NumPy, small enough to read, tested for losslessness."""

from .config import ModelConfig, ModelFormatError
from .generate import generate
from .kvcache import KVCache
from .model import Model, load_model
from .tokenizer import Tokenizer, load_tokenizer

__all__ = ["ModelConfig", "ModelFormatError", "KVCache", "Model", "Tokenizer", "generate", "load_model",
           "load_tokenizer"]
__version__ = "0.1.0"
