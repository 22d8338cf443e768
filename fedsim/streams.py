"""Every random stream of a simulation, named once, with its owner and its entropy layout.

A stream is a generator seeded by a list of integers (numpy's ``SeedSequence``): the run's
seed, slots that vary (round, client, step...) and a fixed tag that keeps it apart from the
others. Two streams draw the same numbers when their lists can be equal, and numpy pads a
list of up to four words with zeros (``[s, 21] == [s, 21, 0]``), so a tag alone does not
separate them: ``tests/test_streams.py`` unifies every pair of layouts and fails on any
overlap not listed in ``OVERLAPS``, each with when (if ever) it can meet in one run.

The tags are the numbers every run since the first has drawn with; changing one changes
results (``benchmarks/fingerprint.py``). A new stream takes a new tag here, and its owner
imports it from here: ``tests/test_streams.py`` refuses a literal number in a seeding call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# --- tags (the fixed words of each layout) ------------------------------------------------
SPLIT_TAG = 1  # a client's train/test split
COHORT_TAG = 7  # the clients sampled for a synchronous round
MAX_SAMPLES_TAG = 5  # data.max_samples' subset (seeded apart from the run's seed)
RELABEL_TAG = 21  # relabel / rotation permutations
PERMUTE_LABELS_TAG = 0x9E7  # each client's own label ids (data.permute_labels; twice, so
# that it never meets cohort's (seed, round, 7, attempt))
CLUSTERED_TAG = 22  # the clustered partition's memberships
ATTACKERS_TAG = 16  # which clients attack
ATTACK_NOISE_TAG = 18  # a gaussian attacker's noise
LOCAL_NOISE_TAG = 17  # a client's local privacy noise
CENTRAL_NOISE_TAG = 19  # the server's privacy noise on a sum
CLIP_COUNT_TAG = 20  # adaptive clipping's noisy count
DISPATCH_TAG = 0xA5C  # who fills a free slot (buffered rounds)
SPEED_TAG = 0x5BEED  # the clients' speeds (system.speeds)
DROPOUT_TAG = 0x0D0F  # a dispatched client dropping out
HOLDOUT_TAG = 0x4E3C  # which clients are held out (eval.holdout_clients)
VALIDATION_TAG = 0x7A1D  # each client's validation split (eval.validation_ratio)
NETWORK_TAG = 0xBA4D  # the clients' network slowdowns (system.network_speeds)
AVAILABILITY_TAG = 0xA7A1  # who is online when a synchronous round samples (system.availability)
TRACE_MAP_TAG = 0x7ACE  # which trace entry each client takes (device / availability trace)
GRADIENT_SUBSET_KIND = 1  # a gradient task's sample subset
PROBE_TRAIN_KIND = 2  # an algorithm's extra training pass (probe.train)
PROBE_BATCHES_KIND = 3  # an algorithm's own minibatches (probe.batches)
STACKED_GRADIENT_KIND = 4  # one entry of a stacked-gradient task
CURVATURE_KIND = 5  # a curvature task's samples and start vector
FEDVG_VAL_TAGS = (0xFED, 0x56)  # FedVG's public validation split
FEDFOMO_VAL_TAG = 20210503  # FedFomo's validation subset (per client, not per seed)
IFCA_INIT_SEED = 3751  # IFCA's model k > 0: torch seed IFCA_INIT_SEED * 1000 + k
SPCACW_TARGET_BATCHES_TAG = 11  # a target's minibatches
SPCACW_PARTICIPATION_TAG = 12  # whether a peer joins a step
SPCACW_PEER_BATCH_TAG = 13  # a peer's minibatch

# probe keys: the 5th word of a PROBE_*_KIND list, one per algorithm pass
FEDPER_FINETUNE_KEY = 11
DITTO_PERSONAL_KEY = 13
FEDREP_HEAD_KEY = 17
FEDBABU_FINETUNE_KEY = 19
LOOP_BATCHES_KEY = 21  # APFL, Per-FedAvg, pFedMe's own loops
PERFEDAVG_EVAL_KEY = 23
NEWCOMER_FINETUNE_KEY = 29  # a held-out client adapting to the federation's model


@dataclass(frozen=True)
class Stream:
    """``layout``: the entropy list, slot names (str) and tags (int) in order. ``kind``: how
    the list becomes a generator (numpy ``default_rng``; a torch seed of 32 or 64 bits from
    ``SeedSequence.generate_state``; a raw torch seed), since only the same kind of
    generator draws the same numbers from the same list."""

    name: str
    owner: str  # the module that draws from it
    kind: str  # "numpy" | "torch32" | "torch64" | "torch-raw"
    layout: tuple[str | int, ...]


def torch_seed(*words: int) -> int:
    """A 32-bit torch seed from an entropy list (``SeedSequence.generate_state``): the one
    helper every ``torch32`` stream seeds through (a client's, a probe's, a task's)."""
    return int(np.random.SeedSequence(list(words)).generate_state(1)[0])


def _streams(*rows: tuple[str, str, str, tuple[str | int, ...]]) -> dict[str, Stream]:
    return {row[0]: Stream(*row) for row in rows}


STREAMS = _streams(
    ("partition", "fedsim.data.partition", "numpy", ("seed",)),
    ("split", "fedsim.data.build", "numpy", ("seed", SPLIT_TAG)),
    ("relabel", "fedsim.data.heterogeneity", "numpy", ("seed", RELABEL_TAG)),
    ("clustered", "fedsim.data.heterogeneity", "numpy", ("seed", CLUSTERED_TAG)),
    ("permute_labels", "fedsim.data.client_labels", "numpy",
     ("seed", PERMUTE_LABELS_TAG, PERMUTE_LABELS_TAG, "client")),
    ("max_samples", "fedsim.data.federated", "numpy", (0, MAX_SAMPLES_TAG)),
    ("holdout", "fedsim.data.holdout", "numpy", ("seed", HOLDOUT_TAG)),
    ("validation", "fedsim.data.validation", "numpy", ("seed", VALIDATION_TAG)),
    ("trace_map", "fedsim.system.traces", "numpy", ("seed", TRACE_MAP_TAG, "trace")),
    ("model_init", "fedsim.simulation", "torch-raw", ("seed",)),
    ("cohort", "fedsim.rounds.clock.sync", "numpy", ("seed", "round", COHORT_TAG, "attempt")),
    ("dispatch", "fedsim.rounds.clock.schedule", "numpy", ("seed", DISPATCH_TAG, "step")),
    ("speeds", "fedsim.rounds.clock.build", "numpy", ("seed", SPEED_TAG)),
    ("network_speeds", "fedsim.rounds.clock.build", "numpy", ("seed", SPEED_TAG, NETWORK_TAG)),
    ("availability", "fedsim.rounds.clock.sync", "numpy",
     ("seed", SPEED_TAG, AVAILABILITY_TAG, "step")),
    ("dropout", "fedsim.rounds.clock.virtual", "numpy", ("seed", SPEED_TAG, DROPOUT_TAG, "step")),
    ("attackers", "fedsim.deployment.attacks", "numpy", ("seed", ATTACKERS_TAG)),
    ("attack_noise", "fedsim.deployment.stages.attack", "torch32",
     ("seed", "round", "client", ATTACK_NOISE_TAG)),
    ("local_noise", "fedsim.deployment.stages.noise", "torch64",
     ("seed", "round", "client", LOCAL_NOISE_TAG)),
    ("central_noise", "fedsim.deployment.stages.noise", "torch64",
     ("seed", "round", CENTRAL_NOISE_TAG, "sum_key")),
    ("clip_count", "fedsim.deployment.stages.clip", "numpy", ("seed", CLIP_COUNT_TAG, "step")),
    ("client", "fedsim.runtime.worker", "torch32", ("seed", "round", "client")),
    ("gradient_subset", "fedsim.runtime.gradient_work", "numpy",
     ("seed", "round", "client", GRADIENT_SUBSET_KIND, "key")),
    ("probe_train", "fedsim.runtime.probe", "torch32",
     ("seed", "round", "client", PROBE_TRAIN_KIND, "key")),
    ("probe_batches", "fedsim.runtime.probe", "torch32",
     ("seed", "round", "client", PROBE_BATCHES_KIND, "key")),
    ("stacked_gradient", "fedsim.runtime.gradient_work", "torch32",
     ("seed", "round", "client", STACKED_GRADIENT_KIND, "row", "entry")),
    ("curvature_samples", "fedsim.runtime.gradient_work", "numpy",
     ("seed", "round", "client", CURVATURE_KIND, "key")),
    ("curvature_start", "fedsim.runtime.gradient_work", "torch32",
     ("seed", "round", "client", CURVATURE_KIND, "key")),
    ("fedvg_validation", "fedsim.algorithms.fedvg", "numpy", ("seed", *FEDVG_VAL_TAGS)),
    ("fedfomo_validation", "fedsim.algorithms.fedfomo", "numpy", ("client", FEDFOMO_VAL_TAG)),
    ("ifca_init", "fedsim.algorithms.ifca", "torch-raw", ("ifca_model_seed",)),
    ("spcacw_target_batches", "fedsim.algorithms.spcacw_exchange", "numpy",
     ("seed", "round", "client", SPCACW_TARGET_BATCHES_TAG, "pass")),
    ("spcacw_participation", "fedsim.algorithms.spcacw_exchange", "numpy",
     ("seed", "round", "step", "target", "peer", SPCACW_PARTICIPATION_TAG)),
    ("spcacw_peer_batch", "fedsim.algorithms.spcacw_exchange", "numpy",
     ("seed", "round", "step", "target", "peer", SPCACW_PEER_BATCH_TAG)),
)  # fmt: skip

# Pairs of one kind whose lists can be equal, and why they do not draw together in one run
# (IFCA's: only with one of IFCA's K-1 seeds in the millions; kept so results do not change).
OVERLAPS: dict[frozenset[str], str] = {
    frozenset({"cohort", "dispatch"}): "cohort sampling runs in synchronous rounds only, "
    "dispatch in buffered rounds only (and only at round 2652, step 7)",
    frozenset({"cohort", "clip_count"}): "adaptive clipping's count noise is off (its std is "
    "0: the count is exact), so clip_count never draws; give it a new tag before enabling it",
    frozenset({"local_noise", "central_noise"}): "privacy.mode is one value: local or central",
    frozenset({"cohort", "trace_map"}): "trace_map's third word is 1 or 2 (the device or the "
    "availability trace), never COHORT_TAG (7); cohort's second word would have to be the "
    "round TRACE_MAP_TAG (31438)",
    frozenset({"model_init", "ifca_init"}): "only when seed is IFCA_INIT_SEED * 1000 + k "
    "(3751001 ...): IFCA's permuted model k would reuse the initial model's torch seed",
}
