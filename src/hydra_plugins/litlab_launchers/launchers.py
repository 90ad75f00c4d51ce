"""`hydra/launcher=slurm` and `hydra/launcher=slurm_local`: submitit's launchers whose jobs run
the code the sweep was submitted with (litlab.utils.code_state), and whose `checkpoint` hook
(submitit calls it on preemption or before the time limit, after litlab's GracefulInterrupt
wrote last.ckpt) resubmits the job unchanged: it starts again in the same job dir, where it
resumes from last.ckpt (litlab.checkpointing.resume.requeued_checkpoint).

Hydra imports this module for every command (its plugin scan): submitit itself is imported
only when a sweep launches.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher


class _Snapshot:
    """Snapshot the code into the sweep dir before the first job is submitted."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        from litlab.runs.run_dir import stop_on_error
        from litlab.utils import code_state as snapshot

        taken = []  # a snapshot in the sweep dir that is not as litlab wrote it: one line, exit 2
        stop_on_error(lambda: taken.append(snapshot.take(Path(str(self.config.hydra.sweep.dir)))))
        code = taken[0]
        snapshot.use(code, self.hydra_context.config_loader)
        return super().launch(job_overrides, initial_job_idx)


class SnapshotSlurmLauncher(_Snapshot, SlurmLauncher):
    pass


class SnapshotLocalLauncher(_Snapshot, LocalLauncher):
    pass
