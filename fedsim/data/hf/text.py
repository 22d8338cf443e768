"""A text column of an ``hf:`` dataset tokenized for a pretrained language model.

When ``model.name`` is ``causal_lm`` or ``sequence_classifier`` (or ``data.tokenizer`` is
set), the string column ``data.input_column`` is tokenized by the model's tokenizer
(``data.tokenizer``; null: ``model.args.source``) into samples of ``data.max_length`` tokens:

- next-token prediction (``causal_lm``, or a user's module): packed (``data.packing`` null or
  true), each client's rows joined by the end-of-text token into one stream cut into windows
  that do not overlap (so a random train/test split leaks no token), or padded (false): one
  sample per row, cut at ``max_length``. A ``TokenDataset`` (``lm_text.py``).
- classification by ``data.label_column`` (``sequence_classifier``): one sample per row, cut
  at ``max_length`` and padded, its label the row's class (a ``LabelledTokens``).

Packing never joins rows of two clients (``data.partition.by``) or of the two splits
(``data.test_split``). Rows without a token (or, predicting, without two) are left out. The
result is a conversion like any ``hf:`` one: cached under ``data.root`` (``cache.py``) by
a key that includes the tokenizer's files, ``max_length``, ``packing`` and the task, and its
digest in partition.json refuses a resume on data that changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from fedsim.data.hf.columns import arrow_column
from fedsim.data.lm_text import DEFAULT_MAX_LENGTH, PAD, TokenDataset, samples_of, tokenizer_stamp
from fedsim.data.names import TOKENIZED_MODELS
from fedsim.errors import ConfigError

NEXT_TOKEN, CLASSIFY = "next_token", "classify"
TEXT_KEYS = ("tokenizer", "max_length", "packing")


@dataclass(frozen=True)
class TextSpec:
    """How a text column is tokenized: by ``source``'s tokenizer (named by config ``key``)
    into ``max_length`` tokens, ``packing`` (next-token only), for ``task``."""

    source: str
    key: str
    max_length: int
    packing: bool
    task: str
    given: tuple[str, Any] | None = None  # the first of data.tokenizer... set: (key, value)
    prompt_column: str | None = None  # instruction data (instruct.py): both or neither
    response_column: str | None = None

    def described(self) -> dict[str, Any]:
        """What the cache key reads: the tokenizer's files (not just its name) and the rest."""
        described = {"tokenizer": tokenizer_stamp(self.key, self.source), "max_length":
                     self.max_length, "packing": self.packing, "task": self.task}  # fmt: skip
        if self.prompt_column is not None:
            described["instruction"] = [self.prompt_column, self.response_column]
        return described


@dataclass(frozen=True)
class LabelledTokens(TokenDataset):
    """Token sequences with a class each: sample i is ``tokens[starts[i]:][:lengths[i]]``
    (``lengths`` <= seq_len), padded to seq_len; ``labels`` its class."""

    next_token: ClassVar[bool] = False  # a class per sample: accuracy, no perplexity

    @property
    def split_gap(self) -> int:  # type: ignore[override]
        return 0

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 tokens (B, seq_len), -1 where padded, and int64 classes (B,)."""
        indices = np.asarray(indices, dtype=np.int64)
        span = np.arange(self.seq_len)
        window = self.tokens[self.starts[indices][:, None] + span].astype(np.int64)
        x = np.where(span < self.lengths[indices][:, None], window, PAD)
        return torch.from_numpy(x), torch.from_numpy(self.labels[indices])

    def model_kwargs(self) -> dict[str, int]:
        return {"vocab_size": self.vocab_size, "seq_len": self.seq_len,
                "num_classes": self.num_classes}  # fmt: skip


def text_spec(data: Any, model: Any) -> TextSpec | None:
    """The tokenization config sections ``data`` and ``model`` ask of an ``hf:`` text column
    (None: the column is read as it is). ConfigError for a key that would act on nothing."""
    task = TOKENIZED_MODELS.get(model.name)
    if task is None and data.tokenizer is None:
        for key in ("max_length", "packing", "prompt_column", "response_column"):
            if getattr(data, key) is not None:
                raise ConfigError(
                    f"data.{key}", getattr(data, key), "acts only on a text column tokenized "
                    f"for a pretrained language model (model.name={'|'.join(TOKENIZED_MODELS)}"
                    f", or data.tokenizer set), and this run has model.name={model.name}",
                )  # fmt: skip
        return None
    task = task or NEXT_TOKEN
    if task == NEXT_TOKEN and data.label_column != "label":  # not the default: set by hand
        raise ConfigError(
            "data.label_column", data.label_column, f"model.name={model.name} predicts the "
            "next token and reads no label: remove it (to classify rows, "
            "model.name=sequence_classifier)",
        )  # fmt: skip
    pair = instruction_columns(data, task, model.name)
    if task == CLASSIFY and data.packing:
        raise ConfigError(
            "data.packing", data.packing, f"model.name={model.name} classifies one row at a "
            "time: a sample is one row, padded; leave data.packing null or false",
        )  # fmt: skip
    from fedsim.pretrained import SMOLLM2

    key = "data.tokenizer" if data.tokenizer else "model.args.source"
    source = str(data.tokenizer or model.args.get("source") or SMOLLM2)
    length = DEFAULT_MAX_LENGTH if data.max_length is None else int(data.max_length)
    packing = task == NEXT_TOKEN and data.packing is not False
    given = next(((f"data.{k}", getattr(data, k)) for k in TEXT_KEYS
                  if getattr(data, k) is not None), None)  # fmt: skip
    if pair is not None:
        return TextSpec(source, key, length, False, task, given, *pair)
    return TextSpec(source, key, length, packing, task, given)


def instruction_columns(data: Any, task: str, model: str) -> tuple[str, str] | None:
    """(prompt, response) columns of instruction data (None: a text column); ConfigError
    for one without the other, for a classifier, or with packing."""
    prompt, response = data.prompt_column, data.response_column
    if prompt is None and response is None:
        return None
    if prompt is None or response is None:
        given, missing = ("data.prompt_column", "data.response_column")[:: 1 if prompt else -1]
        raise ConfigError(given, prompt or response, f"instruction data needs {missing} too "
                          "(the loss is on the response, the prompt masked)")  # fmt: skip
    if task != NEXT_TOKEN:
        raise ConfigError(
            "data.prompt_column", prompt, "trains a language model on responses, and "
            f"model.name={model} classifies: use model.name=causal_lm",
        )  # fmt: skip
    if data.packing:
        raise ConfigError(
            "data.packing", data.packing, "instruction data is one sample a row (prompt, "
            "then response), never packed: leave it null or false",
        )  # fmt: skip
    return prompt, response


def refuse_non_text(spec: TextSpec, column: str, kind: str) -> None:
    """ConfigError: a tokenizing run whose ``data.input_column`` holds ``kind``, not text."""
    if spec.given is not None:
        key, value = spec.given
        raise ConfigError(
            key, value, f"acts only on a text column, and data.input_column={column} holds "
            f"{kind}: nothing would read it; remove it",
        )  # fmt: skip
    raise ConfigError(
        "data.input_column", column, f"holds {kind}, and a pretrained language model reads "
        "text: name a column of strings",
    )  # fmt: skip


def tokenize_table(
    spec: TextSpec, name: str, table: Any, column: str, labels: np.ndarray | None,
    num_classes: int, groups: np.ndarray | None, train_rows: int | None,
) -> tuple[TokenDataset, np.ndarray | None, int | None]:  # fmt: skip
    """(dataset, each sample's group or None, samples of the train split or None) of the
    string column ``column`` of ``table`` (``labels``: each row's class, classifying)."""
    from fedsim.pretrained import load_tokenizer

    texts = arrow_column(table, column).to_pylist()
    if any(not isinstance(t, str) for t in texts):
        first = next(t for t in texts if not isinstance(t, str))
        raise ConfigError("data.input_column", column, f"holds {first!r}, not text")
    if not any(t.strip() for t in texts):
        raise ConfigError(
            "data.input_column", column, f"is an empty column: its {len(texts)} rows hold "
            "only empty text; name the column that holds the text",
        )  # fmt: skip
    tokenizer = load_tokenizer(spec.key, spec.source)
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    rows = len(texts)
    split = np.zeros(rows, bool) if train_rows is None else np.arange(rows) >= train_rows
    keys = np.zeros(rows, np.int64) if groups is None else np.unique(
        groups.astype(str), return_inverse=True)[1].reshape(-1)  # fmt: skip
    if spec.packing:
        # a stream per (split, group), train first, each in order of its first row
        order = np.lexsort((np.arange(rows), split))
        segments: dict[tuple[bool, int], list[int]] = {}
        for r in order:
            segments.setdefault((bool(split[r]), int(keys[r])), []).append(int(r))
        eos = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
        parts = [(members[0], [list(ids[r]) + eos for r in members])
                 for members in segments.values()]  # fmt: skip
    else:
        least = 2 if spec.task == NEXT_TOKEN else 1  # a target, or a token to classify
        parts = [(r, [list(ids[r])]) for r in range(rows) if len(ids[r]) >= least]
    streams, starts, lengths, owner, offset = [], [], [], [], 0
    for row, docs in parts:
        if spec.packing:
            stream, start, length = samples_of(docs, spec.max_length, True, overlap=False)
        else:
            doc = docs[0][: spec.max_length + (spec.task == NEXT_TOKEN)]
            stream = np.asarray(doc, np.int32)
            start, length = np.zeros(1, np.int64), np.array([len(doc)], np.int32)
        streams.append(stream)
        starts.append(start + offset)
        lengths.append(length)
        owner += [row] * len(start)
        offset += len(stream)
    streams.append(np.zeros(spec.max_length + 1, np.int32))  # a window never runs off the end
    owner_rows = np.asarray(owner, np.int64)
    cls = LabelledTokens if spec.task == CLASSIFY else TokenDataset
    dataset = cls(
        name, np.concatenate(streams), np.concatenate(starts).astype(np.int64),
        np.concatenate(lengths).astype(np.int32),
        np.zeros(len(owner_rows), np.int64) if labels is None else labels[owner_rows],
        len(tokenizer), spec.max_length, spec.source,
        num_classes=1 if spec.task == NEXT_TOKEN else num_classes,
    )  # fmt: skip
    if len(dataset) == 0:
        raise ConfigError(
            "data.input_column", column, f"gives no sample of {spec.max_length} tokens: "
            "lower data.max_length, or set data.packing=false",
        )  # fmt: skip
    sample_groups = None if groups is None else groups[owner_rows]
    train = None if train_rows is None else int((~split[owner_rows]).sum())
    return dataset, sample_groups, train
