"""A Hydra callback that leaves a thread running in the sweep's process before its launcher is
set up, as a user's logger or profiler might: `hydra/launcher=parallel` must then start its jobs
as fresh interpreters rather than fork them (hydra_plugins.litlab_launchers.forked)."""

import threading
import time

from hydra.experimental.callback import Callback


class StartsAThread(Callback):
    def on_multirun_start(self, config, **kwargs) -> None:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
