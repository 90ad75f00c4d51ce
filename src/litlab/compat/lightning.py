"""Lightning internals litlab uses (checked against lightning 2.6.6).

- the command DDP child ranks are started with (`_hydra_subprocess_cmd` of the subprocess
  launchers): litlab's children re-run the very job (recipes/ddp);
- `_launch_process_observer`: the watcher that ends all ranks when one dies;
- `Trainer._signal_connector.received_sigterm`: cleared so that a graceful stop on SIGTERM
  validates and writes last.ckpt before stopping (callbacks/guards);
- `ModelCheckpoint._last_global_step_saved`: whether last.ckpt is of this very step;
- `fit_loop._data_fetcher`: the fetcher whose iterator a mid-epoch resume advances;
- `Trainer._checkpoint_connector`: whose `restore` Lightning's finders call (recipes/tuning).
"""

CHECKED_WITH = "2.6.6"


def _version() -> str:
    import lightning

    return lightning.__version__


def _fail(what: str):
    from litlab.compat import missing

    return missing("lightning", CHECKED_WITH, _version(), what)


def set_ddp_child_command(command) -> None:
    """Children of Lightning's subprocess launchers start with `command(...)`."""
    from lightning.fabric.strategies.launchers import subprocess_script as fabric_launcher
    from lightning.pytorch.strategies.launchers import subprocess_script as launcher

    launcher._hydra_subprocess_cmd = fabric_launcher._hydra_subprocess_cmd = command


def observe_processes(procs) -> None:
    """Lightning's observer: when one rank dies, the others are ended."""
    from lightning.fabric.strategies.launchers.subprocess_script import (
        _launch_process_observer,
    )

    _launch_process_observer(procs)


def clear_received_sigterm(trainer) -> None:
    trainer._signal_connector.received_sigterm = False


def last_global_step_saved(checkpoint_callback) -> int:
    return checkpoint_callback._last_global_step_saved


def data_fetcher(trainer):
    """The fit loop's data fetcher (its iterator exists once setup_data ran)."""
    return trainer.fit_loop._data_fetcher


def checkpoint_connector(trainer):
    """What restores a checkpoint into the trainer (Lightning's finders restore through it)."""
    return trainer._checkpoint_connector


def check() -> None:
    """Every name above still exists: a `CompatError` naming the first one that does not."""
    from lightning.fabric.strategies.launchers import subprocess_script as fabric_launcher
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.strategies.launchers import subprocess_script as launcher

    for module in (launcher, fabric_launcher):
        if not callable(getattr(module, "_hydra_subprocess_cmd", None)):
            raise _fail(f"{module.__name__}._hydra_subprocess_cmd")
    if not callable(getattr(fabric_launcher, "_launch_process_observer", None)):
        raise _fail("_launch_process_observer")
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    if not hasattr(getattr(trainer, "_signal_connector", None), "received_sigterm"):
        raise _fail("Trainer._signal_connector.received_sigterm")
    if not callable(getattr(getattr(trainer, "_checkpoint_connector", None), "restore", None)):
        raise _fail("Trainer._checkpoint_connector.restore")
    if not hasattr(trainer.fit_loop, "_data_fetcher"):
        raise _fail("fit_loop._data_fetcher")
    if not hasattr(ModelCheckpoint(), "_last_global_step_saved"):
        raise _fail("ModelCheckpoint._last_global_step_saved")
