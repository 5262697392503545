"""The lab's recipes that trained the shipped drafters (PyTorch, CPU): run them to reproduce ``weights/``. The core never
imports them.

    train_draft.py      the draft model with the target's tokenizer (weights/smoldraft-3l-192)
    train_eagle.py      the EAGLE head (weights/eagle-smollm2-135m)
    train_bpe_draft.py  the draft with its own tokenizer (weights/bpe8k-draft-4l-384)
    store_bf16.py       a trained file's floats stored in bfloat16 (the EAGLE head)
    quantize_int8.py    a draft's matrices stored in int8 with a scale per row (the two drafts); a float32 copy back
    training.py         what they share: the torch import, seeds, the log, the next-token loop, checksums

Nothing in the library imports them; they import the model (to read the target) and torch.
"""
