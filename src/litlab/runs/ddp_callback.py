"""The Lightning side of `runs.ddp.lifecycle`: a callback that joins the Trainer to the ranks
started early. A module-level class, so that `trainer=ddp_spawn` can pickle it to its workers;
a module of its own, so that runs.ddp, imported before Hydra parses, does not import Lightning."""

from lightning.pytorch.callbacks import Callback


class DDPLifecycle(Callback):
    def __init__(self, run, attach, describe):
        self.run = run  # the lifecycle's `_Run`: script, config, and the Trainer once joined
        self.attach, self.describe = attach, describe  # runs.ddp's (passed in: no cycle)

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.run.trainer is None:  # fit, then test: the ranks join once
            self.run.trainer = trainer
            self.attach(trainer)
            self.describe(trainer, self.run.cfg.data.get("batch_size"))
