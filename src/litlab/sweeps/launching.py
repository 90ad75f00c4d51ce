"""What litlab's sweepers share with every Hydra sweeper: keep the context and build the
configured launcher (`hydra/launcher=...`) once the sweep's config is known. Imported by
Hydra's plugin scan for every command: only Hydra's own light modules here."""

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class LaunchingSweeper(Sweeper):
    config: DictConfig | None = None
    launcher = None
    hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        from litlab import console  # logging and re only

        console.launch_lines(self.launcher)  # its lines without litlab's environment overrides
