"""`Tokenizer`: the Hugging Face ``tokenizers`` library on ``tokenizer.json``, plus EOS ids and a chat template."""

from __future__ import annotations

from pathlib import Path

from .config import ModelFormatError, read_json


class Tokenizer:
    def __init__(self, path):
        from tokenizers import Tokenizer as HFTokenizer

        path = Path(path)
        f = path / "tokenizer.json"
        if not f.exists():
            raise ModelFormatError(f"{path}: no tokenizer.json")
        spec = read_json(f)  # names the file if it is not JSON
        if not isinstance(spec.get("model"), dict):
            raise ModelFormatError(f"{f}: no \"model\" object (expected a Hugging Face tokenizers file)")
        try:
            self.tok = HFTokenizer.from_file(str(f))
        except Exception as e:  # the tokenizers library raises a plain Exception for a file it cannot read
            raise ModelFormatError(f"{f}: the tokenizers library cannot read it ({e})") from None
        self.vocab_size = self.tok.get_vocab_size()
        tcfg = _read_json(path / "tokenizer_config.json")
        self.chat_template = tcfg.get("chat_template")
        if not isinstance(self.chat_template, (str, type(None))):
            raise ModelFormatError(f"{path / 'tokenizer_config.json'}: chat_template must be a string, "
                                   f"got {type(self.chat_template).__name__}")
        decoder = tcfg.get("added_tokens_decoder", {})
        added = [t for t in decoder.values() if isinstance(t, dict) and t.get("special")] if isinstance(decoder, dict) else []
        self.special_tokens = sorted({str(t.get("content")) for t in added})
        eos = []
        for name in ("generation_config.json", "config.json"):
            e = _read_json(path / name).get("eos_token_id")
            ids = e if isinstance(e, list) else [] if e is None else [e]
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise ModelFormatError(f"{path / name}: eos_token_id must be a token id or a list of them, got {e!r}")
            eos += ids
        if isinstance(tcfg.get("eos_token"), str) and self.tok.token_to_id(tcfg["eos_token"]) is not None:
            eos.append(self.tok.token_to_id(tcfg["eos_token"]))
        self.eos_ids = sorted(set(int(e) for e in eos))

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str):
        return self.tok.token_to_id(token)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Render ChatML (``<|im_start|>role\\ncontent<|im_end|>\\n``), the format SmolLM2 and Qwen2 use.

        A minimal renderer rather than a Jinja engine: it reads the default system prompt out of
        the template when the template supplies one, and refuses templates that are not ChatML.
        """
        t = self.chat_template
        if not t or "<|im_start|>" not in t:
            raise ValueError("this tokenizer has no ChatML chat template; pass a plain prompt instead of --chat")
        out = ""
        default = _default_system_prompt(t)
        if default and messages and messages[0]["role"] != "system":
            out += f"<|im_start|>system\n{default}<|im_end|>\n"
        for m in messages:
            out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        if add_generation_prompt:
            out += "<|im_start|>assistant\n"
        return out


def _default_system_prompt(template: str) -> str | None:
    for marker in ("<|im_start|>system\n", "<|im_start|>system\\n"):  # newline, or an escaped one
        i = template.find(marker)
        if i >= 0:
            j = template.find("<|im_end|>", i)
            return template[i + len(marker): j] if j > 0 else None
    return None


def _read_json(f: Path) -> dict:
    """An optional JSON object file: {} when absent; errors name the file."""
    return read_json(f) if f.exists() else {}


def load_tokenizer(path) -> Tokenizer:
    return Tokenizer(path)
