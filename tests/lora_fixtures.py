"""A tiny pretrained-model folder for the LoRA tests: a byte-level BPE tokenizer of ~300
tokens and a 2-layer Llama of hidden size 32 with random weights, saved as
``save_pretrained`` saves them (seconds, no download)."""

from __future__ import annotations

from pathlib import Path

from fedsim.algorithm_params import BUILTIN_NAMES, adapter

HIDDEN, LAYERS, HEADS, KV_HEADS = 32, 2, 4, 2
HEAD_DIM = HIDDEN // HEADS
# built-in algorithms that act on a LoRA adapter (they declare the adapter they need, ADAPTER):
# the contract and feature-pair tests on MNIST's CNN leave them out, and the adapter contract
# (test_lora_methods_b_runs.py) runs them on this tiny Llama
ADAPTER_ONLY = tuple(n for n in BUILTIN_NAMES if adapter(n) is not None)
TEXT = [
    "To be, or not to be, that is the question:",
    "Whether 'tis nobler in the mind to suffer",
    "The slings and arrows of outrageous fortune,",
]


def build_tiny_model(folder: Path) -> Path:
    """Write the tokenizer and the model into ``folder``; return it."""
    import tokenizers
    import torch
    import transformers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator(TEXT * 20, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>"
    )
    fast.save_pretrained(folder)
    config = transformers.LlamaConfig(
        vocab_size=len(fast), hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=64, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def lora_params(rank: int, targets: tuple[str, ...] = ("q_proj", "v_proj")) -> int:
    """LoRA's trainable parameters on the tiny model, by hand: A (r x in) and B (out x r)
    per targeted projection per layer."""
    out = {"q_proj": HIDDEN, "k_proj": KV_HEADS * HEAD_DIM, "v_proj": KV_HEADS * HEAD_DIM,
           "o_proj": HIDDEN}  # fmt: skip
    return LAYERS * sum(rank * HIDDEN + out[t] * rank for t in targets)


def shared_tiny_model(base: Path) -> Path:
    """The tiny model under ``base`` (a test process's base temporary folder), built by the
    first module of the process that asks for it; later modules read the same folder."""
    folder = base / "tiny-llama-shared"
    if not (folder / "config.json").is_file():
        folder.mkdir(exist_ok=True)
        build_tiny_model(folder)
    return folder
