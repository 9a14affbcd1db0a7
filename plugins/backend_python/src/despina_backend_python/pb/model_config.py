"""Model-config helpers: reading the config dict, and ``ModelConfig`` for
``auto_complete_config`` (Triton's validation rules and messages)."""

from __future__ import annotations

import json
from typing import Any


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config entry of input ``name`` (from ``json.loads(args["model_config"])``)."""
    return _by_name(model_config, "input", name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config entry of output ``name``."""
    return _by_name(model_config, "output", name)


def _by_name(model_config: dict[str, Any], kind: str, name: str) -> dict[str, Any] | None:
    for entry in model_config.get(kind, []):
        if entry.get("name") == name:
            return dict(entry)
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """True when the config sets ``model_transaction_policy { decoupled: true }``."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


#: Triton's load error for an ``auto_complete_config`` returning anything but a ModelConfig.
NOT_A_MODEL_CONFIG = (
    "auto_complete_config function in model '{model}' must return a valid pb.ModelConfig object."
)


class ModelConfig:
    """The config handed to ``auto_complete_config``; the model adds what is missing."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        self._config = json.loads(model_config) if isinstance(model_config, str) else model_config
        self._config.setdefault("input", [])
        self._config.setdefault("output", [])
        self._config.setdefault("max_batch_size", 0)

    def as_dict(self) -> dict[str, Any]:
        return self._config

    @property
    def _name(self) -> str:
        return str(self._config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Set ``max_batch_size``; refuses lowering a non-zero configured value."""
        if self._config["max_batch_size"] > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {self._config['max_batch_size']}, "
                f"but in auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Use the dynamic batcher unless another scheduler is configured."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output, ("name", "data_type", "dims"))

    def _add(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        where = f"in auto-complete-config function for model '{self._name}'"
        label = f"{kind} '{tensor.get('name', '')}' {where}"
        extra = [k for k in tensor if k not in allowed]
        if extra:
            listed = ", ".join(f"'{a}'" for a in allowed[:-1]) + f" and '{allowed[-1]}'"
            raise ValueError(f"{label} contains property other than {listed}.")
        if "name" not in tensor:
            raise ValueError(f"{kind} {where} is missing 'name' property.")
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(f"{label} is missing '{required}' property.")
        for current in self._config[kind]:
            if current["name"] != tensor["name"]:
                continue
            self._merge(kind, current, tensor)
            return
        self._config[kind].append(dict(tensor))

    def _merge(self, kind: str, current: dict[str, Any], tensor: dict[str, Any]) -> None:
        name, model = tensor["name"], self._name
        configured = current.get("data_type", "TYPE_INVALID")
        if configured not in ("TYPE_INVALID", tensor["data_type"]):
            raise ValueError(
                f"unable to load model '{model}', configuration expects datatype {configured} "
                f"for {kind} '{name}', model provides {tensor['data_type']}"
            )
        dims = [int(d) for d in current.get("dims", [])]
        if dims and dims != [int(d) for d in tensor["dims"]]:
            raise ValueError(
                f"model '{model}', tensor '{name}': the model expects dims {list(tensor['dims'])} "
                f"but the model configuration specifies dims {dims}"
            )
        if (
            "optional" in current
            and "optional" in tensor
            and current["optional"] != tensor["optional"]
        ):
            raise ValueError(
                f"model '{model}', tensor '{name}': the model expects optional "
                f"{tensor['optional']} but the model configuration specifies optional "
                f"{current['optional']}"
            )
        current.update(tensor)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """Set ``model_transaction_policy`` (only ``decoupled``); refuses changing it."""
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted
