"""Every `federate.*` setting, with its type and bounds, in one place: a field of federate.py's
settings model (`entries.FederateCommandSettings`), checked with the rest of the config before
any data is read or Ray starts, so a bad value costs one line and exit code 2 (not a traceback
from inside a Ray worker, or a process that never exits).

The models are `config.settings.Settings` (strict, no unknown keys, the common one-line
messages) over litlab's annotated bounds (`litlab.bounds`); rules across keys raise `UserError`
in their own words.
"""

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from litlab.bounds import Ge, Gt, Interval, NonNegFloat, NonNegInt, PosFloat, PosInt, Seed
from litlab.config.settings import Settings
from litlab.errors import UserError

PARTITIONS = ("iid", "dirichlet")
COMPRESSIONS = ("none", "int8", "topk")
DP_MODES = ("none", "local", "central")
LR_DECAYS = ("constant", "cosine")


class DpSettings(Settings):
    mode: Literal[DP_MODES] = "none"
    clipping_norm: PosFloat = 1.0
    noise_multiplier: NonNegFloat = 0.1
    epsilon: PosFloat = 10.0
    delta: Annotated[float, Interval(gt=0, lt=1)] = 1e-5


class ClientResources(Settings):
    # a Ray actor with no CPU is never scheduled: the run would wait forever
    num_cpus: Annotated[float, Gt(0)] = 1
    num_gpus: NonNegFloat = 0.0


class RayInitArgs(Settings):
    # other keys go to ray.init as they are (e.g. _temp_dir)
    model_config = ConfigDict(extra="allow")

    num_cpus: PosInt = 2
    num_gpus: NonNegInt = 0
    # Ray refuses less than ~75 MB
    object_store_memory: Annotated[int, Ge(78_643_200), "a number of bytes >= 78643200"] = (
        100_000_000
    )
    include_dashboard: bool = False
    log_to_driver: bool = False


class Backend(Settings):
    client_resources: ClientResources = ClientResources()
    init_args: RayInitArgs = RayInitArgs()

    @model_validator(mode="after")
    def _fits(self):
        need, have = self.client_resources, self.init_args
        if need.num_cpus > have.num_cpus:
            raise UserError(
                f"federate.backend.client_resources.num_cpus={need.num_cpus:g} is more than "
                f"the {have.num_cpus} CPUs of federate.backend.init_args.num_cpus: no client "
                "could run"
            )
        if need.num_gpus > have.num_gpus:
            raise UserError(
                f"federate.backend.client_resources.num_gpus={need.num_gpus:g} is more than "
                f"the {have.num_gpus} GPUs of federate.backend.init_args.num_gpus: no client "
                "could run"
            )
        return self


class FederateSettings(Settings):
    """`federate:` in configs/federate.yaml (the comments there say what each key does)."""

    num_clients: PosInt = 10
    rounds: PosInt = 20
    fraction: Annotated[float, Interval(gt=0, le=1)] = 1.0
    local_epochs: PosInt | Literal["auto"] = "auto"
    lr_decay: Literal[LR_DECAYS] = "cosine"
    partition: Literal[PARTITIONS] = "dirichlet"
    alpha: PosFloat = 0.5
    seed: Seed = 42
    client_eval: bool = True
    compression: Literal[COMPRESSIONS] = "none"
    topk_ratio: Annotated[float, Interval(gt=0, lt=1)] = 0.25
    dp: DpSettings = DpSettings()
    fail_clients: list[NonNegInt] = Field(default_factory=list)
    verbose: bool = False
    backend: Backend = Backend()
    # Flower's strategy: its own constructor checks its keys
    strategy: dict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _clients_exist(self):
        if int(self.num_clients * self.fraction) < 1:
            raise UserError(
                f"federate.fraction={self.fraction} samples no client of {self.num_clients} "
                f"in a round; use a fraction >= {1 / self.num_clients:.3g}"
            )
        bad = [c for c in self.fail_clients if c >= self.num_clients]
        if bad:
            raise UserError(
                f"federate.fail_clients={self.fail_clients} names client {bad[0]}; "
                f"clients are 0 to {self.num_clients - 1}"
            )
        return self


def resolve_auto(cfg) -> None:
    """`federate.local_epochs=auto` -> the number the data's task kind declares
    (`Kind.federated_local_epochs`), in place: the clients' trainer.max_epochs interpolates
    it, and the stored run config holds the number."""
    if cfg.federate.get("local_epochs") != "auto":
        return
    from litlab import tasks
    from litlab.tasks.kind import Kind

    try:
        epochs = tasks.kind_of_data(str(cfg.data._target_)).federated_local_epochs
    except Exception:  # noqa: BLE001  (a bad data target is refused by the config checks)
        epochs = Kind.federated_local_epochs  # the default of every kind
    cfg.federate.local_epochs = epochs
