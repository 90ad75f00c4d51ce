"""BatchNorm running statistics, averaged as pooled moments (`federate.norm_stats=pooled`).

FedAvg averages each client's `running_var` as it does weights. Under label skew the clients'
activation means differ, and the mean of their variances misses the spread between those
means: the global model normalizes test batches with too small a variance, its activations
grow layer after layer, and it predicts one class (GIN on PROTEINS stayed at the majority
class this way, with a test loss above ln 2). Clients send E[x^2] = var + mean^2 instead, the
weighted mean of which is exact; the server turns it back into the pooled variance
var = E[x^2] - mean^2 (`from_moments`). Weights are unchanged; `shared` averages the
variances as plain FedAvg does.
"""

import torch

VAR, MEAN = "running_var", "running_mean"


def _pairs(state: dict):
    for key in state:
        if key.endswith(VAR) and key[: -len(VAR)] + MEAN in state:
            yield key, key[: -len(VAR)] + MEAN


def to_moments(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = dict(state)
    for var, mean in _pairs(state):
        out[var] = state[var] + state[mean] ** 2
    return out


def from_moments(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = dict(state)
    for var, mean in _pairs(state):
        out[var] = (state[var] - state[mean] ** 2).clamp_min(0)
    return out
