"""CharLSTM: LEAF's Shakespeare ``stacked_lstm`` (next-character prediction)."""

from __future__ import annotations

import torch
from torch import nn

from lightning_modules.base import FLModule


class CharLSTM(FLModule):
    """Embedding 8 -> 2-layer LSTM 256 -> linear to the vocabulary on the last step (LEAF)."""

    block_names = ("embedding", "lstm", "head")

    def __init__(
        self,
        vocab_size: int = 80,
        seq_len: int = 80,
        num_classes: int = 80,
        embedding_dim: int = 8,
        hidden_size: int = 256,
        num_layers: int = 2,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.seq_len = seq_len
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_size, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The LSTM's last hidden output, which the output layer reads."""
        out, _ = self.lstm(self.embedding(x))
        return out[:, -1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """int64 tokens (B, T) -> logits (B, num_classes) for the token after the last."""
        return self.head(self.features(x))
