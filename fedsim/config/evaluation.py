"""The ``eval`` section: how clients are judged (who, with which model, and when).

``holdout_clients``: clients that never train and are never sampled; at every evaluation
each algorithm serves them as a newcomer by its own rule (``docs/algorithms.md``), and the
round reports ``unseen/acc_*`` and ``participation_gap`` beside the usual accuracies.
``model``: the personalized model (today's), the global one, or both. ``when``: on the model
a client receives (PFLlib), or on the one it keeps after the round's local training
(FL-bench). ``target_acc``: accuracies whose first evaluated round (and its ``sim_time``,
where the run has a clock) summary.json reports: rounds and time to accuracy.
``validation_ratio``: a share of each client's train split, drawn by the seed and kept out of
training, judged with the same model at the same moment as its test split; "best" in
summary.json is then the round best on validation, reported on test; ``select_on`` says best
by which metric (next-token runs: loss by default). ``count_flops``: each
client's local training counted in FLOPs (and, on a GPU, its peak memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.checks import checked, patterns_or_none

EVAL_MODELS = ("personal", "global", "both")
EVAL_TIMES = ("start", "after_training")
# what "best" is chosen on (summary.json's selected_by): auto is loss for next-token
# prediction, accuracy otherwise (fedsim/metrics.py)
SELECT_ON = ("auto", "loss", "perplexity", "accuracy")


def _holdout_ok(value: float) -> bool:
    """0, a fraction in (0, 1), or a whole count >= 1."""
    return value == 0 or 0 < value < 1 or (value >= 1 and float(value).is_integer())


@dataclass
class EvalConfig:
    """``eval``: held-out clients, the model evaluated, and when (see the module doc)."""

    holdout_clients: float = checked(  # clients that never train: a count (>= 1) or a fraction
        0, _holdout_ok, "must be 0, a fraction in (0, 1), or a whole count >= 1"
    )
    # clients held out by their name (a natural partition's data.partition.by value), shell
    # patterns such as [*-3] (one client per language of debian-reference); with
    # holdout_clients 0, instead of the seed's draw
    holdout_names: list | None = checked(
        None, patterns_or_none,
        "a non-empty list of name patterns such as *-3 (or null: none by name)",
    )  # fmt: skip
    finetune_epochs: int = checked(  # epochs a newcomer adapts on its own train split
        1, lambda v: v >= 0, "must be >= 0"
    )
    model: str = checked(  # personal (the model a client uses) | global | both
        "personal", lambda v: v in EVAL_MODELS, f"allowed: {', '.join(EVAL_MODELS)}"
    )
    when: str = checked(  # start (the model received) | after_training (the model kept)
        "start", lambda v: v in EVAL_TIMES, f"allowed: {', '.join(EVAL_TIMES)}"
    )
    # accuracies (acc_weighted) whose first round, and virtual time, summary.json reports
    target_acc: list[float] = checked(
        predicate=lambda v: (
            isinstance(v, list) and all(isinstance(x, (int, float)) and 0 < x <= 1 for x in v)
        ),
        allowed="a list of accuracies in (0, 1]",
        factory=list,
    )
    # a share of each client's train split held out as its validation split (0: none)
    validation_ratio: float = checked(
        0.0, lambda v: v == 0 or 0 < v < 1, "must be 0 (no validation split) or in (0, 1)"
    )
    count_flops: bool = False  # FLOPs (and GPU peak memory) of each client's local training
    # the round "best" is chosen on: auto (next-token: loss; else accuracy) | loss |
    # perplexity | accuracy, on validation with eval.validation_ratio
    select_on: str = checked(
        "auto", lambda v: v in SELECT_ON, f"allowed: {', '.join(SELECT_ON)}"
    )


__all__ = ["EVAL_MODELS", "EVAL_TIMES", "SELECT_ON", "EvalConfig"]
