"""What a client uploads: the one place that asks the algorithm (``Algorithm.model_upload``).

Task building, the server stages and the config checks all read ``decide_upload``. An
algorithm's answer may depend on the client and the round (FedPer uploads its whole model in
cold-start rounds and its base after), so the checks ask about every client in the first
and the last training round (``checked_uploads``).
"""

from __future__ import annotations

from collections.abc import Iterator

from fedsim.algorithms.base import Algorithm, ModelUpload


def decide_upload(algorithm: Algorithm, client: int, round_idx: int) -> ModelUpload | None:
    """What ``client`` uploads in round ``round_idx`` (None: no model update)."""
    return algorithm.model_upload(algorithm.client_info(client, round_idx))


def checked_uploads(
    algorithm: Algorithm, num_clients: int, rounds: int
) -> Iterator[ModelUpload | None]:
    """Every client's upload in the first and the last training round."""
    for round_idx in sorted({0, max(rounds - 1, 0)}):
        for client in range(num_clients):
            yield decide_upload(algorithm, client, round_idx)
