"""A run's LoRA adapters written as peft ``save_pretrained`` folders, and read back as a start.

``adapters/global`` holds the federation's global adapter (where the algorithm has one) and
``adapters/clients/<name>`` each client's full personal adapter: the model the client is
evaluated with (``Algorithm.personalized_params``: FedSA-LoRA's shared A with its own B,
Ditto's personal adapter, FedPer's shared lower layers with its personal top layers), written
where it differs from the global one (``index.json`` maps every client to its folder, ``global``
for a client whose model is the global one). Each folder is ``adapter_config.json`` +
``adapter_model.safetensors``, so plain ``peft.PeftModel.from_pretrained(base, folder)`` loads
it on the same base with the same outputs. ``adapters/index.json`` names each folder's client.

The adapter is read through peft's own ``get_peft_model_state_dict`` on the peft model inside
the run's template (whatever wraps it), never through fedsim's parameter names. A model with a
second adapter (FedDPA's personal one, mixed by ``dual.mix`` = (g, p, w)) is written as one
adapter of rank 2r: A = [A_g; A_p], B = [g B_g, p B_p], alpha doubled so the scale alpha / r
stays; an instance-wise weight (w != 0) has no peft form and the folder's index entry says so.
A model whose trained entries peft cannot hold (FedEx-LoRA's dense residuals, a classifier's
head) gets no folder, and one note says why.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedsim.algorithms.base import Algorithm, ServerState
from fedsim.errors import ConfigError
from fedsim.storage import ClientStateStore
from lightning_modules.flat_params import ParamLayout

GLOBAL, PERSONAL = "default", "personal"  # peft's adapter names (lightning_modules/dual_adapter)
MIX = "dual.mix"
INDEX = "index.json"


def peft_model_of(module: nn.Module) -> Any | None:
    """The peft model inside ``module`` (None: it has no peft adapter). A process that never
    imported peft holds none, and a run without an adapter does not pay peft's import."""
    peft = sys.modules.get("peft")
    if peft is None:
        return None
    return next((m for m in module.modules() if isinstance(m, peft.PeftModel)), None)


def folder_name(name: str) -> str:
    """A client's name as a folder name (letters, digits, ``.``, ``_``, ``-``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "client"
    return safe[:100]


class AdapterExport:
    """Writes a run's adapters from a server state and the client states (module doc)."""

    def __init__(self, template: nn.Module, algorithm: Algorithm, names: dict[int, str]):
        self.template, self.algorithm, self.names = template, algorithm, names
        self.peft_model = peft_model_of(template)
        self.layout = ParamLayout.from_module(template)
        self.params = dict(template.named_parameters())
        self.skip_reason = self._unsupported()

    def _unsupported(self) -> str | None:
        if self.peft_model is None:
            return "the model has no peft adapter"
        peft_held = (".lora_A.", ".lora_B.")
        other = [e.name for e in self.layout.entries
                 if not any(part in e.name for part in peft_held)
                 and not e.name.endswith((MIX, "dual.reference"))]  # fmt: skip
        if other:
            return (f"the model trains {other[0]}, which a peft LoRA adapter cannot hold "
                    "(FedEx-LoRA's residual, a classifier's head)")  # fmt: skip
        return None

    def _load(self, flat: torch.Tensor) -> tuple[float, float, float] | None:
        """Put ``flat`` into the template; the dual adapter's (g, p, w), if it has one."""
        mix = None
        with torch.no_grad():
            for entry in self.layout.entries:
                value = self.layout.view(flat, entry.name)
                if entry.name.endswith(MIX):
                    mix = tuple(float(v) for v in value)
                self.params[entry.name].data.copy_(value.to(self.params[entry.name].dtype))
        return mix  # type: ignore[return-value]

    def adapter(self, flat: torch.Tensor) -> tuple[Any, dict[str, torch.Tensor], str | None]:
        """(peft config, peft state dict, a note where it is not exact) of model ``flat``."""
        from peft import get_peft_model_state_dict

        mix = self._load(flat)
        config = copy.deepcopy(self.peft_model.peft_config[GLOBAL])
        first = get_peft_model_state_dict(self.peft_model, adapter_name=GLOBAL)
        state = {k: v.detach().clone().float() for k, v in first.items()}
        if mix is None:
            return config, state, None
        g, p, w = mix[:3]  # (g, p, w, f): f, the prompt share of the mixing weight, exports nothing
        second = get_peft_model_state_dict(self.peft_model, adapter_name=PERSONAL)
        for key, value in list(state.items()):
            other = second[key].detach().float()
            if ".lora_A." in key or key.endswith("lora_A.weight"):
                state[key] = torch.cat([value, other], dim=0)
            else:
                state[key] = torch.cat([g * value, p * other], dim=1)
        config.r, config.lora_alpha = 2 * config.r, 2 * config.lora_alpha
        note = None if w == 0 else (
            f"FedDPA's instance-wise weight (w={w:g}) has no peft form: this adapter mixes "
            f"the global and personal adapters at the fixed ({g:g}, {p:g})"
        )  # fmt: skip
        return config, state, note

    def write_one(self, folder: Path, flat: torch.Tensor) -> str | None:
        """``flat``'s adapter as a peft folder; its note (None: exact)."""
        from safetensors.torch import save_file

        config, state, note = self.adapter(flat)
        folder.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(str(folder))
        save_file({k: v.contiguous() for k, v in state.items()},
                  str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})  # fmt: skip
        return note

    def write(self, folder: Path, state: ServerState, store: ClientStateStore | None,
              rounds: int) -> dict[str, Any]:  # fmt: skip
        """Every adapter of ``state`` and ``store`` under ``folder``; the index written."""
        algorithm, index = self.algorithm, {"rounds": rounds, "global": None, "clients": {}}
        global_flat = None
        if algorithm.has_global_model:
            global_flat = algorithm.global_params(algorithm.broadcast(state)).detach().float()
            index["global"] = {"folder": "global",
                               "note": self.write_one(folder / "global", global_flat)}  # fmt: skip
        used: set[str] = set()
        for client in range(algorithm.federation.num_clients):
            client_state = None if store is None else store.get(client)
            info = algorithm.client_info(client, rounds)
            flat = algorithm.personalized_params(state, client_state, info).detach().float()
            name = self.names.get(client, str(client))
            if global_flat is not None and torch.equal(flat, global_flat):
                index["clients"][name] = {"id": client, "folder": "global", "note": None}
                continue
            sub = folder_name(name)
            while sub in used:
                sub += f"-{client}"
            used.add(sub)
            note = self.write_one(folder / "clients" / sub, flat)
            index["clients"][name] = {"id": client, "folder": f"clients/{sub}", "note": note}
        (folder / INDEX).write_text(json.dumps(index, indent=1) + "\n")
        return index


def start_adapter(template: nn.Module, initial: torch.Tensor, folder: str) -> torch.Tensor:
    """``initial`` (the template's flat vector) with its global adapter replaced by the peft
    folder ``folder`` (``adapters.start_from``); a ConfigError in one line if it does not fit."""
    from peft import PeftConfig, set_peft_model_state_dict
    from safetensors.torch import load_file

    key = "adapters.start_from"
    path = Path(folder)
    weights = path / "adapter_model.safetensors"
    peft_model = peft_model_of(template)
    if peft_model is None:
        raise ConfigError(key, folder, "the model has no LoRA adapter to start: set "
                          "model.name=causal_lm")  # fmt: skip
    if not (path / "adapter_config.json").is_file() or not weights.is_file():
        raise ConfigError(key, folder, "must be a peft save_pretrained folder (adapter_config"
                          ".json and adapter_model.safetensors)")  # fmt: skip
    theirs, ours = PeftConfig.from_pretrained(str(path)), peft_model.peft_config[GLOBAL]
    for field, mine in (("r", ours.r), ("target_modules", ours.target_modules)):
        if getattr(theirs, field, None) != mine:
            raise ConfigError(key, folder, f"has {field}={getattr(theirs, field, None)} and "
                              f"this run's adapter {field}={mine}: set the model's rank and "
                              "targets to the folder's")  # fmt: skip
    layout = ParamLayout.from_module(template)
    params = dict(template.named_parameters())
    with torch.no_grad():
        for entry in layout.entries:
            params[entry.name].data.copy_(layout.view(initial, entry.name))
        result = set_peft_model_state_dict(peft_model, load_file(str(weights)), adapter_name=GLOBAL)
    missing = [k for k in result.missing_keys if ".lora_" in k and f".{GLOBAL}." in k]
    if missing or result.unexpected_keys:
        extra = len(result.unexpected_keys)
        raise ConfigError(key, folder, "its matrices do not match this run's adapter "
                          f"({len(missing)} missing, {extra} unexpected)")  # fmt: skip
    flat = initial.clone()
    with torch.no_grad():
        for entry in layout.entries:
            flat[layout.slice_of(entry.name)] = params[entry.name].detach().reshape(-1).float()
    return flat
