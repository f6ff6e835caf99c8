"""Assembling and running the platform: the Ray Serve application and the local launcher."""

from zerolayer.serve.app import APP_NAME, build_app, deployment_name
from zerolayer.serve.launcher import Platform

__all__ = ["APP_NAME", "build_app", "deployment_name", "Platform"]
