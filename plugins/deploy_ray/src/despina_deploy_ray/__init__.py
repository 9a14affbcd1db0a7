"""Despina on a Ray cluster: a Ray Serve deployment whose replicas each run one in-process
Despina server, answering v2 REST and gRPC through Ray Serve's proxies."""

from despina_deploy_ray.app import DEFAULT_AUTOSCALING, app_builder, despina_app
from despina_deploy_ray.grpc_service import SERVICER
from despina_deploy_ray.replica import DespinaReplica

__all__ = ["DEFAULT_AUTOSCALING", "SERVICER", "DespinaReplica", "app_builder", "despina_app"]
