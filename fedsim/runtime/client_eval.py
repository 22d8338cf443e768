"""A client's evaluation inside the worker: the model ``eval.model`` names (and/or the
global one) on the client's test split, and on its validation split when it has one
(``eval.validation_ratio``): the same model, at the same moment."""

from __future__ import annotations

import time
from typing import Any

import torch

from fedsim.data.federated import ClientSplit


def evaluate_client_models(
    worker: Any, out: Any, broadcast: dict[str, Any], params: torch.Tensor, split: ClientSplit
) -> torch.Tensor:
    """``out``'s evaluation of ``params`` (eval.model: and/or the global model's) on the
    client's test split, and of the model ``out.evaluation`` judged on its validation split;
    returns the parameters left in the module (``worker``: the ``ClientWorker``; ``out``:
    its ``ClientResult``)."""
    began = time.perf_counter()
    model = worker.spec.client.eval_model
    in_place = params
    if model != "personal":  # first: the personal model's stay in place for training
        in_place = worker.algorithm.global_params(broadcast)
        out.global_evaluation = worker._evaluate(in_place, split.test)
    if model != "global":
        out.evaluation = worker._evaluate(params, split.test)
        in_place = params
    else:
        out.evaluation, out.global_evaluation = out.global_evaluation, None
    if len(split.val):  # the model just judged on test, still in place
        out.validation = worker._evaluate(in_place, split.val)
    out.eval_seconds += time.perf_counter() - began
    return in_place


def evaluate_on_splits(worker: Any, out: Any, params: torch.Tensor, split: ClientSplit) -> None:
    """``params`` on the client's test split into ``out.evaluation``, and on its validation
    split, when it has one, into ``out.validation`` (a held-out client's newcomer model)."""
    out.evaluation = worker._evaluate(params, split.test)
    if len(split.val):  # eval.validation_ratio: the same model on its validation split
        out.validation = worker._evaluate(params, split.val)


__all__ = ["evaluate_client_models", "evaluate_on_splits"]
