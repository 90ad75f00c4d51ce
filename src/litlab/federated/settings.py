"""The settings of `python src/federate.py` (`federate.*` of configs/federate.yaml), with their
bounds and the rules across them: checked by `config.validate.entry_config` with the model,
data and trainer groups, before any data is read or the header printed."""

from typing import Annotated, Literal

from pydantic import model_validator

from litlab.bounds import Ge, Interval, NonNegFloat, NonNegInt, PosFloat, PosInt, Seed
from litlab.config.settings import EntrySettings, Settings
from litlab.errors import UserError

#: Ray's object store refuses less than ~75 MB
MIN_OBJECT_STORE = 78_643_200


class DPSettings(Settings):
    mode: Literal["none", "local", "central"] = "none"
    clipping_norm: PosFloat = 1.0
    noise_multiplier: PosFloat = 0.1
    epsilon: PosFloat = 10.0
    delta: Annotated[float, Interval(gt=0, lt=1), "a probability in (0, 1), e.g. 1e-5"] = 1e-5


class ClientResources(Settings):
    num_cpus: PosFloat = 1
    num_gpus: NonNegFloat = 0.0


class RayInit(Settings):
    num_cpus: PosInt = 2
    num_gpus: NonNegInt = 0
    object_store_memory: Annotated[
        int, Ge(MIN_OBJECT_STORE), f"a number of bytes >= {MIN_OBJECT_STORE} (Ray's minimum)"
    ] = 100_000_000
    include_dashboard: bool = False
    log_to_driver: bool = False


class BackendSettings(Settings):
    client_resources: ClientResources = ClientResources()
    init_args: RayInit = RayInit()


class FederateSettings(Settings):
    num_clients: PosInt = 10
    rounds: PosInt = 20
    fraction: Annotated[float, Interval(gt=0, le=1), "a share of the clients in (0, 1]"] = 1.0
    local_epochs: PosInt = 1
    lr_decay: Literal["constant", "cosine"] = "cosine"
    partition: Literal["iid", "dirichlet"] = "dirichlet"
    alpha: Annotated[PosFloat, "a Dirichlet concentration > 0"] = 0.5
    seed: Seed = 42
    compression: Literal["none", "int8", "topk"] = "none"
    topk_ratio: Annotated[float, Interval(gt=0, lt=1), "a share of the entries in (0, 1)"] = 0.25
    dp: DPSettings = DPSettings()
    fail_clients: list[NonNegInt] = []
    verbose: bool = False
    backend: BackendSettings = BackendSettings()
    #: Flower's server strategy (`_target_`: checked by its signature, like any target)
    strategy: dict

    @model_validator(mode="after")
    def _across(self):
        n = self.num_clients
        if any(c >= n for c in self.fail_clients):
            raise UserError(
                f"federate.fail_clients={list(self.fail_clients)} names a client that does not "
                f"exist; client ids are 0..{n - 1} (federate.num_clients={n})"
            )
        if int(n * self.fraction) < 1:
            raise UserError(
                f"federate.fraction={self.fraction} samples no client of {n} in a round; use "
                f"a fraction >= {1 / n:.3g}"
            )
        cpus = self.backend.init_args.num_cpus
        if self.backend.client_resources.num_cpus > cpus:
            raise UserError(
                f"federate.backend.client_resources.num_cpus="
                f"{self.backend.client_resources.num_cpus} is more than Ray may use "
                f"(federate.backend.init_args.num_cpus={cpus}): no client could ever run"
            )
        if self.backend.client_resources.num_gpus > self.backend.init_args.num_gpus:
            raise UserError(
                f"federate.backend.client_resources.num_gpus="
                f"{self.backend.client_resources.num_gpus} but Ray is given "
                f"federate.backend.init_args.num_gpus={self.backend.init_args.num_gpus}: "
                "no client could ever run"
            )
        return self


class FederateRun(EntrySettings):
    """federate.py's own keys (model, data, trainer... are checked by their targets)."""

    seed: Seed = 42
    optimized_metric: Literal["test/acc", "test/loss", "federate/bytes_per_round"] | None = (
        "test/acc"
    )
    federate: FederateSettings

    def check_kind(self, kind) -> None:
        kind.refuse_federated()
