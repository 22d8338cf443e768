"""Every algorithm's keys (``algorithm.<key>``), by config name, without importing torch.

The config check reads an algorithm's ``Params`` dataclass from here, so checking a config
never imports an algorithm's module (torch takes a second). The built-ins keep their
``Params`` in this package; ``fedsim.algorithms.registry.register`` adds an algorithm
registered at run time; an algorithm named by import path (``module:Class``) is imported
and its ``Params`` read from the class.
"""

from __future__ import annotations

import dataclasses

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.algorithm_params.baselines import (
    APFLParams,
    FedBABUParams,
    FedRepParams,
    LGFedAvgParams,
    MOONParams,
    PerFedAvgParams,
    PFedMeParams,
)
from fedsim.algorithm_params.clustered import FCParams, FedDiscoParams, IFCAParams
from fedsim.algorithm_params.fedavg_family import (
    DittoParams,
    FedAvgMParams,
    FedAvgParams,
    FedDynParams,
    FedProxParams,
    FedVGParams,
    ScaffoldParams,
)
from fedsim.algorithm_params.personalized import (
    CwFedAvgParams,
    FedAMPParams,
    FedFomoParams,
    FedPerParams,
)
from fedsim.algorithm_params.spcacw import SPCACWParams
from fedsim.errors import ConfigError
from fedsim.plugins import import_object, is_import_path

# config name -> Params; fedsim/algorithms/<name>.py registers the class of the same name
PARAMS: dict[str, type[AlgorithmParams]] = {
    "fedavg": FedAvgParams,
    "fedavgm": FedAvgMParams,
    "fedprox": FedProxParams,
    "scaffold": ScaffoldParams,
    "feddyn": FedDynParams,
    "ditto": DittoParams,
    "fedvg": FedVGParams,
    "local": AlgorithmParams,
    "cwfedavg": CwFedAvgParams,
    "fedper": FedPerParams,
    "fedamp": FedAMPParams,
    "fedfomo": FedFomoParams,
    "ifca": IFCAParams,
    "fc": FCParams,
    "feddisco": FedDiscoParams,
    "oracle": AlgorithmParams,
    "spcacw": SPCACWParams,
    "fedrep": FedRepParams,
    "fedbn": AlgorithmParams,
    "lgfedavg": LGFedAvgParams,
    "fedbabu": FedBABUParams,
    "fedrod": AlgorithmParams,
    "apfl": APFLParams,
    "pfedme": PFedMeParams,
    "perfedavg": PerFedAvgParams,
    "moon": MOONParams,
    "fednova": AlgorithmParams,
}
BUILTIN_NAMES = tuple(PARAMS)
# one line each, for `fedsim keys` (the algorithms' own docs are docs/algorithms.md)
SUMMARIES = {
    "fedavg": "FedAvg: the server takes the cohort's weighted mean (any server optimizer)",
    "fedavgm": "FedAvgM: FedAvg with server momentum 0.9",
    "fedprox": "FedProx: FedAvg with a proximal pull (mu/2)||w - w_global||^2 on clients",
    "scaffold": "SCAFFOLD: control variates correct the clients' drift",
    "feddyn": "FedDyn: a dynamic regularizer aligns local and global optima",
    "ditto": "Ditto: a personal model pulled towards the global FedAvg model",
    "fedvg": "FedVG: FedAvg weighted by inverse validation-gradient norms",
    "local": "Local-only: every client trains alone, no communication",
    "cwfedavg": "cwFedAvg (+ WDR): class-wise models mixed per client by its class weights",
    "fedper": "FedPer: shared base, personal top layers",
    "fedamp": "FedAMP: attentive message passing between similar clients",
    "fedfomo": "FedFomo: each client mixes the peers that help its validation loss",
    "ifca": "IFCA: clients pick the cluster model with the lowest loss",
    "fc": "FC (CFL): clusters split when client updates disagree",
    "feddisco": "FedDisco: weights from sample counts and label-distribution discrepancy",
    "oracle": "Oracle: FedAvg within each true cluster (needs a clustered partition)",
    "spcacw": "SP-CACW: a target weights its peers' gradients by estimated bias and variance",
    "fedrep": "FedRep: shared body, personal head; head epochs, then body epochs",
    "lgfedavg": "LG-FedAvg: local body, shared top layers (the mirror of FedPer)",
    "fedbn": "FedBN: FedAvg that keeps every BatchNorm layer local (needs a BN model)",
    "fedbabu": "FedBABU: body under a frozen random head; fine-tuned before evaluation",
    "fedrod": "FedRoD: generic head on balanced softmax + a personal head",
    "apfl": "APFL: a learned mixture of a personal and the global model",
    "pfedme": "pFedMe: Moreau-envelope personal models, K inner steps per batch",
    "perfedavg": "Per-FedAvg: MAML-style FedAvg, one adaptation step before evaluation",
    "moon": "MOON: FedAvg with a model-contrastive loss (global vs previous model)",
    "fednova": "FedNova: normalized averaging for unequal local steps",
}
ALGORITHM_BASE = "fedsim.algorithms.base.Algorithm"  # checked by name: no torch imported here


def allowed_algorithms() -> str:
    return (
        f"allowed: {', '.join(sorted(PARAMS))}, or module:Class naming a subclass of "
        f"{ALGORITHM_BASE}"
    )


def add_params(name: str, params: type[AlgorithmParams]) -> None:
    """Make ``algorithm.name=name`` known to the config check (an algorithm registered at run
    time, e.g. by a test); a built-in name keeps its own keys."""
    if PARAMS.get(name, params) is not params:
        raise ValueError(f"algorithm {name!r} is registered with other keys already")
    PARAMS[name] = params


def params_class(name: str) -> type[AlgorithmParams]:
    """The ``Params`` dataclass of ``algorithm.name``; a ConfigError says what is allowed.

    A ``module:Class`` is imported here (user code, as a plug-in is) and must subclass
    ``Algorithm`` (checked by the base's qualified name, so this module imports no torch).
    """
    if name in PARAMS:
        return PARAMS[name]
    if not is_import_path(name):
        raise ConfigError("algorithm.name", name, allowed_algorithms())
    cls = import_object("algorithm.name", name, allowed_algorithms())
    if not (isinstance(cls, type) and any(c.__module__ + "." + c.__qualname__ == ALGORITHM_BASE
                                          for c in cls.__mro__)):  # fmt: skip
        what = cls.__name__ if isinstance(cls, type) else type(cls).__name__ + " instance"
        raise ConfigError(
            "algorithm.name", name, f"{what} is not a subclass of {ALGORITHM_BASE}; "
            + allowed_algorithms(),
        )  # fmt: skip
    params = cls.Params
    if not (isinstance(params, type) and dataclasses.is_dataclass(params)):
        raise ConfigError(
            "algorithm.name", name, f"{cls.__name__}.Params is not a dataclass of its keys"
        )
    return params


__all__ = ["BUILTIN_NAMES", "PARAMS", "AlgorithmParams", "add_params", "params_class"]
