"""Federated learning on Flower: litlab's own LightningModules trained across simulated clients
(FedAvg, FedProx, ...), with label-skewed partitions and compressed updates. See
docs/federated.md; the recipe is `litlab.federated.federation.federate`."""

import os

# Flower sends usage telemetry unless told not to: litlab runs offline
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
# Ray's notice about accelerator variables (litlab sets num_gpus explicitly)
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
