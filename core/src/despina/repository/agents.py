"""Repository agents: run, in config order, before a model loads.

A model's ``model_repository_agents { agents [ { name: "checksum" parameters {...} } ] }``
names agents provided by plugins (hook ``despina_repository_agents``). Each agent class
is built with the agent's parameters and its async ``prepare(model_dir) -> Path`` may
check or rewrite the model's files and returns the folder to load from; raising fails
the model's load with the agent's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from despina.errors import DespinaError, Unavailable
from despina.repository.config import ModelConfig

if TYPE_CHECKING:
    from despina.plugin.ports import RepositoryAgent


async def run_agents(
    agents: Mapping[str, type[RepositoryAgent]], config: ModelConfig, model_dir: Path
) -> Path:
    """Run the config's agents (looked up by name in ``agents``, the installed agent
    classes) in order; return the folder the model loads from."""
    for spec in config.model_repository_agents.agents:
        cls = agents.get(spec.name)
        if cls is None:
            installed = ", ".join(sorted(agents)) or "none"
            raise Unavailable(
                f"model '{model_dir.name}': unknown repository agent '{spec.name}'; installed: {installed}"
            )
        agent = cls(dict(spec.parameters))
        try:
            model_dir = Path(await agent.prepare(model_dir))
        except DespinaError:
            raise
        except Exception as exc:  # noqa: BLE001 - an agent failure fails this load only
            raise Unavailable(
                f"model '{config.name or model_dir.name}': repository agent '{spec.name}' failed: {exc}"
            ) from None
    return model_dir
