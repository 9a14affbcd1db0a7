"""Running a model's ``auto_complete_config``: in a one-off child process (process mode,
as Triton, so imports never touch the server) or in the server (in-process mode)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from despina import ConfigError, ModelContext, private_shm_dir

from despina_backend_python.hosting.loading import (
    MODEL_ERRORS,
    describe_exception,
    load_model_class,
)
from despina_backend_python.pb import runtime as pb_runtime
from despina_backend_python.pb.model_config import NOT_A_MODEL_CONFIG, ModelConfig
from despina_backend_python.server.child_process import ChildDied, spawn
from despina_backend_python.server.execution_env import resolve_environment
from despina_backend_python.server.model_host import ServerRuntime
from despina_backend_python.wire.shm import new_tag


async def run_auto_complete(
    ctx: ModelContext, config_json: str, in_process: bool
) -> dict[str, Any] | None:
    """The completed config as a JSON dict; None when the model defines no hook.

    Raises ConfigError with the model's error (the model becomes UNAVAILABLE).
    """
    try:
        if "auto_complete_config" not in ctx.model_file.read_text(
            encoding="utf-8", errors="replace"
        ):
            return None  # no hook: spare the child process
    except OSError:
        pass  # reported by the load itself
    host = ServerRuntime(ctx.host, asyncio.get_running_loop(), ctx.name, str(ctx.version_dir))
    if in_process:
        text = await asyncio.to_thread(_in_this_process, ctx, config_json, host)
    else:
        python, env = resolve_environment(ctx.parameters, ctx.model_dir)
        hello = {
            "op": "auto_complete",
            "model_file": str(ctx.model_file),
            "config": config_json,
            "prefix": private_shm_dir(),
            "tag": new_tag(),
            "model_name": ctx.name,
            "model_dir": host.model_dir,
        }
        try:
            child, reply = await spawn(python, env, hello, host, lambda _: None)
        except ChildDied as exc:
            raise ConfigError(f"auto-complete of model '{ctx.name}' failed: {exc}") from None
        await child.stop(10.0, finalize=False)
        if reply["op"] != "config":
            raise ConfigError(reply.get("message", "auto-complete failed"))
        text = reply["config"]
    return json.loads(text) if text else None


def _in_this_process(ctx: ModelContext, config_json: str, host: ServerRuntime) -> str:
    token = pb_runtime.activate(host)  # pb_utils.get_model_dir(), logging
    try:
        model_class = load_model_class(ctx.model_file, f"despina_autocomplete_{id(ctx):x}")
        hook = getattr(model_class, "auto_complete_config", None)
        if hook is None:
            return ""
        result = hook(ModelConfig(config_json))
    except MODEL_ERRORS as exc:  # model code may raise anything
        raise ConfigError(describe_exception(exc)) from None
    finally:
        pb_runtime.deactivate(token)
        pb_runtime.forget(host)
    if not isinstance(result, ModelConfig):
        raise ConfigError(NOT_A_MODEL_CONFIG.format(model=ctx.name))
    return json.dumps(result.as_dict())
