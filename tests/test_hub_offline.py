"""One Hugging Face offline rule (fedsim/hub_offline.py): a pretrained model's Hub id
(``pretrained.hub_unreachable``) and an ``hf:`` dataset's (``hf.open.open_split``) decide
alike for every value of HF_HUB_OFFLINE, as huggingface_hub itself does. No network: the
connection and the download are stand-ins."""

from __future__ import annotations

import socket

import pytest

from fedsim.data.hf.open import HFSource, open_split
from fedsim.errors import ConfigError
from fedsim.hub_offline import offline_reason
from fedsim.pretrained import hub_unreachable

OFFLINE = {"1": True, "true": True, "TRUE": True, "yes": True, "on": True,
           "0": False, "": False, "false": False, "no": False, None: False}  # fmt: skip


class Tried(Exception):
    """The dataset download was attempted (the Hub was judged reachable)."""


class Connection:
    def close(self) -> None:
        pass


def hf_data_offline(tmp_path) -> bool:
    """Whether ``open_split`` of a Hub id refused it as offline without trying it."""
    with pytest.raises(ConfigError) as err:
        open_split(HFSource("hf:owner/not-local"), str(tmp_path))
    return "is set" in str(err.value)


@pytest.mark.parametrize("value", list(OFFLINE), ids=lambda v: "unset" if v is None else repr(v))
def test_models_and_data_agree_on_hf_hub_offline(value, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    if value is not None:
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: Connection())

    def tried(*args, **kwargs):
        raise Tried

    monkeypatch.setattr("datasets.load_dataset", tried)
    model_offline = hub_unreachable() is not None
    assert model_offline == hf_data_offline(tmp_path) == OFFLINE[value]
    if OFFLINE[value]:
        assert hub_unreachable() == offline_reason() == "HF_HUB_OFFLINE is set"


def test_the_rule_is_huggingface_hubs() -> None:
    """The first non-empty of HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE decides, by
    huggingface_hub's true values."""
    from huggingface_hub import constants

    assert set(constants.ENV_VARS_TRUE_VALUES) == {"1", "ON", "YES", "TRUE"}
    assert offline_reason({"TRANSFORMERS_OFFLINE": "1"}) == "TRANSFORMERS_OFFLINE is set"
    assert offline_reason({"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "1"}) is not None
    assert offline_reason({"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"}) is None
    assert offline_reason({"HF_HUB_OFFLINE": "maybe"}) is None
    assert offline_reason({}) is None
