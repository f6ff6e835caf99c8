"""The platform on Kubernetes: `zerolayer cluster` (status, scale, rollout of the Helm chart's
RayService; its serveConfigV2; the prepare step of the model cache).

  commands.py   the subcommands and what they print
  kube.py       the Kubernetes API calls (kubernetes client), with conflict retries
  prepare.py    import models and build missing artifacts once; wait for them
"""

from zerolayer.cluster.commands import scale_patch, status_report, tier_apps_of
from zerolayer.cluster.prepare import missing, prepare, wait_prepared

__all__ = ["scale_patch", "status_report", "tier_apps_of", "prepare", "wait_prepared", "missing"]
