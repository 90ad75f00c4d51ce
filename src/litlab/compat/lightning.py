"""Lightning internals litlab uses (checked against lightning 2.6.6).

- the command DDP child ranks are started with (`_hydra_subprocess_cmd` of the subprocess
  launchers): litlab's children re-run the very job (runs/ddp);
- `_launch_process_observer`: the watcher that ends all ranks when one dies;
- `Trainer._signal_connector.received_sigterm`: cleared so that a graceful stop on SIGTERM
  validates and writes last.ckpt before stopping (callbacks/guards);
- `ModelCheckpoint._last_global_step_saved`: whether last.ckpt is of this very step;
- `fit_loop._data_fetcher`: the fetcher whose iterator a mid-epoch resume advances;
- `Trainer._checkpoint_connector`: whose `restore` Lightning's finders call (runs/tuning),
  and whose `dump_checkpoint` writes a federated run's global model (federated/state);
- `Trainer._signal_connector.received_sigterm`: read and set by the DDP SIGTERM handler
  (callbacks/guards);
- `ModelCheckpoint._save_last_checkpoint` / `_monitor_candidates`: last.ckpt at epoch end
  (checkpointing/resume_state);
- `LightningModule._device_mesh`: the mesh of ModelParallelStrategy (models, trainer=fsdp);
- `LightningModule._trainer`: whether a module is attached to a Trainer (its `trainer`
  property raises when not: the graph module outside a fit, e.g. export);
- profilers' `_local_rank` and `_row_limit`; `Profiler._prepare_streams` / `_write_stream`,
  overridden by `PrintedReport` so that a report is printed too; `PyTorchProfiler._sort_by_key`,
  the column its table sorts by (callbacks/summary);
- `data_connector._get_distributed_sampler`: wrapped so that eval shards are not padded
  (utils/distributed);
- `lightning.fabric.utilities.logger._convert_params` / `_flatten_dict`: MLflow's params as
  Lightning logs them (loggers); `MLFlowLogger._run_id` / `_initialized`;
- `CSVLogger._fs` / `ExperimentWriter._fs`: the filesystem a resumed metrics.csv is read
  from, and `CSVLogger._experiment`, the writer it makes once (loggers);
- `ExperimentWriter._check_log_dir_exists` / `_record_new_keys`: overridden by
  `AppendingWriter` (below), which keeps a resumed run's metrics.csv (loggers);
- `logger_connector.result._ResultMetric.to`: given a fast path while a litlab module fits or
  tests (`quick_result_moves`, installed by models).
"""

import csv

from lightning.pytorch.loggers.csv_logs import ExperimentWriter

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


def received_sigterm(trainer) -> bool:
    return trainer._signal_connector.received_sigterm


def set_received_sigterm(trainer) -> None:
    trainer._signal_connector.received_sigterm = True


def save_last_checkpoint(callback, trainer) -> None:
    """What `ModelCheckpoint` itself does for last.ckpt, with the current monitor values."""
    callback._save_last_checkpoint(trainer, callback._monitor_candidates(trainer))


def device_mesh(module):
    """The device mesh ModelParallelStrategy gave the module (None under other strategies)."""
    return module._device_mesh


def attached_trainer(module):
    """The module's Trainer, or None outside one (`module.trainer` raises then)."""
    return module._trainer


def profiler_local_rank(profiler):
    return profiler._local_rank


def profiler_row_limit(profiler) -> int:
    return profiler._row_limit


class PrintedReport:
    """Mixed into a Lightning profiler: its report is also printed (rank 0), not only written
    into the file (Lightning prints nothing once given a `dirpath`)."""

    def _prepare_streams(self) -> None:
        if self._write_stream is not None:
            return
        super()._prepare_streams()
        write = self._write_stream

        def both(text: str) -> None:
            write(text)
            if profiler_local_rank(self) in (None, 0):
                print(text, flush=True)

        self._write_stream = both


def sort_profile_by(profiler, key: str) -> None:
    """The column a PyTorchProfiler's table sorts by, one its argument check does not list
    (torch's table takes it)."""
    profiler._sort_by_key = key


def wrap_distributed_sampler(wrapper) -> None:
    """Lightning's `_get_distributed_sampler` -> `wrapper(original)`, once per process."""
    from lightning.pytorch.trainer.connectors import data_connector

    if not getattr(data_connector._get_distributed_sampler, "litlab", False):
        data_connector._get_distributed_sampler = wrapper(data_connector._get_distributed_sampler)


class _QuickMoves:
    """How many litlab modules are set up in this process, and Lightning's own method."""

    users = 0
    original = None


def _states_on(metric, device) -> bool:
    """Whether every tensor `_ResultMetric.to(device)` would move is on `device` already: its
    attributes and the tensors one level inside its dicts, lists and tuples (states, their
    defaults, caches). Anything deeper, or a Metric, answers False: the slow path decides."""
    import torch
    from torchmetrics import Metric

    for value in metric.__dict__.values():
        if isinstance(value, torch.Tensor):
            if value.device != device:
                return False
        elif isinstance(value, Metric):
            return False
        elif isinstance(value, dict | list | tuple):
            for item in value.values() if isinstance(value, dict) else value:
                if isinstance(item, torch.Tensor):
                    if item.device != device:
                        return False
                elif isinstance(item, dict | list | tuple | Metric):
                    return False
    return True


def _quick_to(self, *args, **kwargs):
    """`_ResultMetric.to` that returns at once when a logged tensor's states are on the device
    asked for already: Lightning calls it on every `self.log`, and its `apply_to_collection`
    walk over the whole metric object (deep-copying its metadata) is ~0.15 ms of a ~0.2 ms
    call on a CPU (bench/graph.py). Any other call goes to Lightning's method."""
    import torch

    device = args[0] if len(args) == 1 else kwargs.get("device") if not args else None
    if (
        self.is_tensor
        and isinstance(device, torch.device | str)
        and set(kwargs) <= {"device", "non_blocking"}
        and _states_on(self, torch.device(device))
    ):
        return self
    return _QuickMoves.original(self, *args, **kwargs)


def quick_result_moves(install: bool) -> None:
    """Install (or, when the last litlab module is torn down, remove) `_quick_to`: only
    litlab's own fits and tests use it, so plain Lightning in the same process (a notebook, the
    benchmark's baseline) runs unchanged. Nested setups count. A fit that raises skips the
    module's teardown (Lightning calls none on errors): the fast path then stays until the
    process ends, which changes no result, only how fast a plain `self.log` is."""
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric

    if install:
        if _QuickMoves.users == 0:
            _QuickMoves.original = _ResultMetric.to
            _ResultMetric.to = _quick_to
        _QuickMoves.users += 1
    elif _QuickMoves.users > 0:
        _QuickMoves.users -= 1
        if _QuickMoves.users == 0:
            _ResultMetric.to = _QuickMoves.original


def flat_params(params) -> dict:
    """Hyperparameters flattened and converted as Lightning's loggers log them."""
    from lightning.fabric.utilities.logger import _convert_params, _flatten_dict

    return _flatten_dict(_convert_params(params))


def filesystem(writer):
    """The fsspec filesystem of a CSV logger or its ExperimentWriter (local or remote)."""
    return writer._fs


def mlflow_run_id(logger):
    return logger._run_id


def mlflow_initialized(logger) -> bool:
    return logger._initialized


def check_lightning() -> None:
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
    _check_more()


def _init_names(cls) -> str:
    import inspect

    return inspect.getsource(cls.__init__)


def _check_more() -> None:
    from lightning.fabric.utilities import logger as fabric_logger
    from lightning.pytorch import LightningModule
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import MLFlowLogger
    from lightning.pytorch.profilers import PyTorchProfiler, SimpleProfiler
    from lightning.pytorch.trainer.connectors import data_connector
    from lightning.pytorch.trainer.connectors.logger_connector import result

    metric = getattr(result, "_ResultMetric", None)
    if not callable(getattr(metric, "to", None)) or "is_tensor" not in _init_names(metric):
        raise _fail("logger_connector.result._ResultMetric.to / is_tensor")
    for owner, name in (
        (ModelCheckpoint, "_save_last_checkpoint"),
        (ModelCheckpoint, "_monitor_candidates"),
        (data_connector, "_get_distributed_sampler"),
        (fabric_logger, "_convert_params"),
        (fabric_logger, "_flatten_dict"),
    ):
        if not callable(getattr(owner, name, None)):
            raise _fail(f"{owner.__name__}.{name}")
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    for name in ("_fs", "_experiment"):
        if not hasattr(CSVLogger(save_dir="."), name):
            raise _fail(f"CSVLogger.{name}")
    for name in ("_check_log_dir_exists", "_record_new_keys"):
        if not callable(getattr(ExperimentWriter, name, None)):
            raise _fail(f"ExperimentWriter.{name}")
    for name in ("_device_mesh", "_trainer"):
        if not hasattr(LightningModule(), name):
            raise _fail(f"LightningModule.{name}")
    if not hasattr(SimpleProfiler(), "_local_rank"):
        raise _fail("Profiler._local_rank")
    if not hasattr(PyTorchProfiler(), "_row_limit"):
        raise _fail("PyTorchProfiler._row_limit")
    if not hasattr(PyTorchProfiler(), "_sort_by_key"):
        raise _fail("PyTorchProfiler._sort_by_key")
    if not callable(getattr(SimpleProfiler, "_prepare_streams", None)) or not hasattr(
        SimpleProfiler(), "_write_stream"
    ):
        raise _fail("Profiler._prepare_streams / _write_stream")
    import inspect

    source = inspect.getsource(MLFlowLogger.__init__)  # building one needs a tracking store
    if "self._run_id" not in source or "self._initialized" not in source:
        raise _fail("MLFlowLogger._run_id / _initialized")


# Lightning's CSV ExperimentWriter, kept from deleting a resumed run's metrics.csv: its private
# `_check_log_dir_exists` (which deletes the file) and `_record_new_keys` (which rewrites the
# header from the keys it holds) are overridden here, behind the fence, and nowhere else.
class AppendingWriter(ExperimentWriter):
    """Keeps an existing metrics.csv and its columns, and appends to it."""

    def _header(self) -> list[str]:
        if not filesystem(self).isfile(self.metrics_file_path):
            return []
        with filesystem(self).open(self.metrics_file_path, "r", newline="") as f:
            return next(csv.reader(f), [])

    def _check_log_dir_exists(self) -> None:
        self.metrics_keys = sorted(self._header())

    def _record_new_keys(self) -> set[str]:
        """Keys missing from the file's header (then it is rewritten). The header is re-read:
        another copy of this writer may have grown it (under trainer=ddp_spawn the spawned
        rank 0 writes the fit's metrics, then the test's copy starts from the parent's)."""
        header = self._header()
        self.metrics_keys = sorted(set(self.metrics_keys) | set(header))
        super()._record_new_keys()
        return set(self.metrics_keys) - set(header)


def appending_experiment(logger) -> AppendingWriter:
    """A CSVLogger's writer, made once (Lightning keeps it in `_experiment`): an
    AppendingWriter in the logger's log dir."""
    if logger._experiment is None:
        filesystem(logger).makedirs(logger.root_dir, exist_ok=True)
        logger._experiment = AppendingWriter(log_dir=logger.log_dir)
    return logger._experiment
