"""SDK tests: the gateway over in-process replicas (fake engine, real Redis) served over real
HTTP, for the SDK's calls against the real routes."""

from tests.gateway.conftest import make_gateway  # noqa: F401  (the fixture)
