"""How much work a task is, in sample-forward units: what the pool balances its shares by."""

from __future__ import annotations

import numpy as np

from fedsim.client_work import LocalWork
from fedsim.gradient_tasks import CurvatureTask, GradientTask
from fedsim.runtime.worker import ClientTask, Task

TRAIN_COST_PER_SAMPLE = 3.0  # forward + backward ~ 3 forwards; evaluation costs 1 per sample
TASK_COST_FIXED = 1.0  # per task, so that tiny tasks still spread


def task_cost(
    task: Task, train_sizes: np.ndarray, test_sizes: np.ndarray, local: LocalWork
) -> float:
    """Relative compute of a task, in sample-forward units (used to balance workers); a
    client trains the samples of its own local work (``LocalWork.samples``)."""
    cost = TASK_COST_FIXED
    if isinstance(task, ClientTask):
        if task.train:
            cost += TRAIN_COST_PER_SAMPLE * local.samples(task.client, train_sizes[task.client])
        if task.evaluate:
            cost += float(test_sizes[task.client])
        if task.newcomer:  # its rule may adapt on its train split (about one pass)
            cost += TRAIN_COST_PER_SAMPLE * float(train_sizes[task.client])
    elif isinstance(task, GradientTask) and task.stack is not None:
        cost += TRAIN_COST_PER_SAMPLE * sum(len(samples) for _, samples in task.at)
    elif isinstance(task, CurvatureTask):
        n = len(task.indices) if task.indices is not None else int(train_sizes[task.client])
        n = n if task.num_samples is None else min(n, task.num_samples)
        cost += 2 * TRAIN_COST_PER_SAMPLE * task.iterations * n  # one HVP ~ two backprops
    elif isinstance(task, GradientTask):
        n = len(task.indices) if task.indices is not None else int(train_sizes[task.client])
        if task.num_samples is not None:
            n = min(n, task.num_samples)
        cost += TRAIN_COST_PER_SAMPLE * n
    return cost
