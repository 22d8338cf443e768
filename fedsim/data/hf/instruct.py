"""Instruction data: a prompt column and a response column of an ``hf:`` dataset, one sample a
row, the loss on the response alone (as OpenFedLLM and FlowerTune train).

A row is written as the tokenizer's chat template writes a user turn and the assistant's
answer (``apply_chat_template``), or, for a tokenizer without one, as Alpaca's template
(``### Instruction:`` / ``### Response:``, OpenFedLLM's and FlowerTune's default), the response
followed by the end-of-text token. The sample is the row's tokens cut at ``max_length + 1``;
its targets are its tokens one position on, and a target that is a prompt token is -100
(no loss, not counted by evaluation's per-token loss, accuracy and perplexity). A row whose
prompt leaves no response token within ``max_length + 1`` has no target and is left out.
``fedsim sample`` writes a prompt the same way (``instruction_text``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch

from fedsim.data.dataset_types import Dataset
from fedsim.data.lm_text import IGNORED, PAD, TokenDataset
from fedsim.errors import ConfigError

ALPACA_PROMPT = "### Instruction:\n{prompt}\n\n### Response:\n"


def instruction_text(tokenizer: Any, prompt: str, response: str | None = None) -> tuple[str, str]:
    """(the prompt's text, the response's text after it) as a row is trained on; the prompt
    ends where the model starts answering."""
    if getattr(tokenizer, "chat_template", None):
        user = [{"role": "user", "content": prompt}]
        head = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        if response is None:
            return head, ""
        whole = tokenizer.apply_chat_template(
            [*user, {"role": "assistant", "content": response}], tokenize=False
        )
        tail = whole[len(head) :] if whole.startswith(head) else response
        return head, tail
    return ALPACA_PROMPT.format(prompt=prompt), "" if response is None else response


@dataclass(frozen=True)
class InstructionTokens(TokenDataset):
    """One sample per row (``TokenDataset``'s fields, padded), and ``prompt_lengths``: how many
    of the sample's first tokens are its prompt, whose targets are -100."""

    prompt_lengths: np.ndarray | None = None  # int32 (N,)
    next_token: ClassVar[bool] = True

    @property
    def split_gap(self) -> int:  # type: ignore[override]
        return 0  # rows, not windows of one stream: nothing to keep apart

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 inputs (B, seq_len), -1 where padded, and targets (B, seq_len): -100 where
        there is none or where the target is a prompt token."""
        assert self.prompt_lengths is not None
        x, y = super().batch(indices)
        indices = np.asarray(indices, dtype=np.int64)
        target_at = torch.arange(1, self.seq_len + 1)  # target j is token j + 1
        prompt = torch.from_numpy(self.prompt_lengths[indices].astype(np.int64))[:, None]
        return x, torch.where(target_at >= prompt, y, torch.full_like(y, IGNORED))

    def subset(self, indices: np.ndarray) -> InstructionTokens:
        assert self.prompt_lengths is not None
        out = super().subset(indices)
        return replace(out, prompt_lengths=self.prompt_lengths[np.asarray(indices, np.int64)])

    def concat(self, other: Dataset) -> InstructionTokens:
        assert isinstance(other, InstructionTokens) and self.prompt_lengths is not None
        out = super().concat(other)
        both = np.concatenate([self.prompt_lengths, other.prompt_lengths])
        return replace(out, prompt_lengths=both)


def tokenize_pairs(
    spec: Any, name: str, table: Any, groups: np.ndarray | None, train_rows: int | None
) -> tuple[InstructionTokens, np.ndarray | None, int | None]:
    """(dataset, each sample's group, samples of the train split) of the prompt / response
    columns of ``table`` (``spec``: an ``text.TextSpec`` with both columns)."""
    from fedsim.data.hf.columns import arrow_column
    from fedsim.pretrained import load_tokenizer

    columns = {"data.prompt_column": spec.prompt_column,
               "data.response_column": spec.response_column}  # fmt: skip
    values = {}
    for key, column in columns.items():
        values[key] = arrow_column(table, column).to_pylist()
        bad = next((v for v in values[key] if not isinstance(v, str)), "")
        if not isinstance(bad, str):
            raise ConfigError(key, column, f"holds {bad!r}, not text")
    tokenizer = load_tokenizer(spec.key, spec.source)
    eos = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    chat = bool(getattr(tokenizer, "chat_template", None))
    keep = spec.max_length + 1
    streams, lengths, prompts, rows = [], [], [], []
    for row, (prompt, response) in enumerate(zip(*values.values(), strict=True)):
        head, tail = instruction_text(tokenizer, prompt, response)
        head_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
        tail_ids = tokenizer(tail, add_special_tokens=False)["input_ids"] + ([] if chat else eos)
        ids = (head_ids + tail_ids)[:keep]
        if len(head_ids) >= len(ids):  # no response token left to learn
            continue
        streams.append(np.asarray(ids, np.int32))
        lengths.append(len(ids))
        prompts.append(len(head_ids))
        rows.append(row)
    if not rows:
        raise ConfigError("data.max_length", spec.max_length, "leaves no response token of any "
                          "row after its prompt: raise it")  # fmt: skip
    starts = np.cumsum([0, *lengths[:-1]]).astype(np.int64)
    owner = np.asarray(rows, np.int64)
    dataset = InstructionTokens(
        name, np.concatenate([*streams, np.zeros(keep, np.int32)]), starts,
        np.asarray(lengths, np.int32), np.zeros(len(rows), np.int64), len(tokenizer),
        spec.max_length, spec.source, prompt_lengths=np.asarray(prompts, np.int32),
    )  # fmt: skip
    sample_groups = None if groups is None else groups[owner]
    train = None if train_rows is None else int((owner < train_rows).sum())
    return dataset, sample_groups, train


__all__ = ["PAD", "InstructionTokens", "instruction_text", "tokenize_pairs"]
