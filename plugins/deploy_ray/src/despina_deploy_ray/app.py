"""The Ray Serve application: :func:`despina_app` in Python, :func:`app_builder` for
``serve run`` / a Serve config file. Replicas scale on ongoing requests (Ray Serve's
``autoscaling_config``) unless a fixed ``num_replicas`` is given."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ray import serve
from ray.serve import Application

from despina_deploy_ray.replica import DespinaReplica

#: Scale between 1 and 4 replicas, aiming at 2 requests in flight per replica.
DEFAULT_AUTOSCALING: dict[str, Any] = {
    "min_replicas": 1,
    "max_replicas": 4,
    "target_ongoing_requests": 2,
}


def despina_app(
    args: Sequence[str],
    *,
    name: str = "despina",
    num_replicas: int | None = None,
    autoscaling_config: Mapping[str, Any] | None = None,
    max_ongoing_requests: int = 64,
    ray_actor_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> Application:
    """A bound Despina deployment. ``args``: the replicas' ``despina serve`` command line;
    ``num_replicas`` fixes the count, else ``autoscaling_config`` (default
    :data:`DEFAULT_AUTOSCALING`) scales it; ``options``: any other
    ``serve.deployment`` option (``health_check_period_s``, ...)."""
    scaling: dict[str, Any] = (
        {"num_replicas": num_replicas}
        if num_replicas is not None
        else {"autoscaling_config": dict(autoscaling_config or DEFAULT_AUTOSCALING)}
    )
    deployment = serve.deployment(
        name=name,
        max_ongoing_requests=max_ongoing_requests,
        ray_actor_options=dict(ray_actor_options or {"num_cpus": 1}),
        **scaling,
        **options,
    )(DespinaReplica)
    return deployment.bind(list(args))


def app_builder(config: Mapping[str, str]) -> Application:
    """For ``serve run despina_deploy_ray:app_builder args='--model-repository=s3://b/m'
    min_replicas=1 max_replicas=8 target_ongoing_requests=4`` (or a Serve config's
    ``args``): every value a string, as ``serve run`` passes them."""
    known = {"args", *DEFAULT_AUTOSCALING}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"unknown application arguments {unknown}; known: {sorted(known)}")
    scaling = {key: int(config.get(key, value)) for key, value in DEFAULT_AUTOSCALING.items()}
    return despina_app(shlex.split(config.get("args", "")), autoscaling_config=scaling)
