"""The federated recipe behind `python src/federate.py`: check, partition, simulate, save
(the run itself: `federation.Federation`).

Flower's simulation engine (Ray backend) runs the clients in worker processes; this process
runs the server (strategy, central evaluation) in a thread. Every round ends with the global
model and the history on disk (`state.py`), so a stop loses at most the round in progress,
and `ckpt_path=last|<run dir>` continues from there. `processes.py` makes sure that nothing
Ray started outlives the run, however it ends.
"""

import logging
from pathlib import Path

from omegaconf import DictConfig

from litlab.errors import UserError

log = logging.getLogger(__name__)


def check_federated(cfg: DictConfig):
    """Every setting, before any data is read or Ray starts: one line on the first bad one.
    Returns the `federate.*` settings."""
    from litlab.config import validate

    _without_selection(cfg)
    # `federate.local_epochs=auto` resolved first: the data class's task kind
    return validate.check(cfg, "federate").federate


def _without_selection(cfg: DictConfig) -> None:
    """Callbacks that select or stop on validation metrics (`monitor`/`monitors`: checkpoints,
    early stopping) are left out: clients run no validation (the server tests the global model
    each round) and the run keeps its global model itself. An experiment made for train.py
    brings them (`experiment=gat_cora`: the paper's joint selection); said in the log file."""
    from omegaconf import open_dict

    callbacks = cfg.get("callbacks")
    if not callbacks:
        return
    dropped = [
        name
        for name, node in callbacks.items()
        if node is not None and ("monitor" in node or "monitors" in node)
    ]
    with open_dict(cfg):
        for name in dropped:
            del cfg.callbacks[name]
    if dropped:
        log.info("federate: callbacks %s left out (clients do not validate)", ", ".join(dropped))


def _own_settings(cfg: DictConfig) -> tuple[dict, dict]:
    """A resume continues the run as it was started (`python src/federate.py ckpt_path=<run
    dir>`, as printed on a stop): its checkpoint and round state, checked as data, and its
    settings taken into `cfg` where this command does not set them (`state.own_settings`)."""
    from litlab.checkpointing import atomic_io as links
    from litlab.federated import state

    path = Path(cfg.ckpt_path)
    links.check_links(Path(cfg.paths.output_dir))  # it writes there: no way out
    ckpt, resumed = state.load_resumed(path)
    taken = state.own_settings(cfg, ckpt, str(path), path.parents[1])
    if taken:
        log.info("federate: from the run to resume: %s", ", ".join(taken))
    return ckpt, resumed


def _check_taken(cfg: DictConfig, resumed: dict):
    """The settings taken from the run, checked as this command's own (the command's were,
    before): a bad one is the file's, said so in one line."""
    try:
        f = check_federated(cfg)
    except UserError as err:
        raise UserError(f"ckpt_path={cfg.ckpt_path}: the run to resume has {err}") from None
    if resumed["round"] > f.rounds:
        raise UserError(
            f"ckpt_path={cfg.ckpt_path}: its round state (round {resumed['round']}) is past "
            f"the run's federate.rounds={f.rounds}"
        )
    return f


def federate(cfg: DictConfig, engine=None) -> dict[str, float]:
    """Run (or resume) the federated simulation described by `cfg`; returns the final metrics.

    `engine(server_main, client_app, num_clients, backend, stopped)` runs the rounds:
    `processes.simulate` (Flower's Ray simulation) unless a test passes an in-process one."""
    from litlab.checkpointing import resume
    from litlab.config import data_paths

    # last|<run dir> -> its checkpoints/last.ckpt; a requeued scheduler job: its own last.ckpt
    resume.resolve_checkpoint(cfg)
    typed = data_paths.absolute(cfg)  # as train.py stores them: absolute
    if typed:
        log.info("federate: data paths made absolute (as typed: %s)", typed)
    f = check_federated(cfg)
    ckpt, resumed = (None, None) if cfg.get("ckpt_path") is None else _own_settings(cfg)
    if resumed is not None:
        f = _check_taken(cfg, resumed)
    from litlab.federated.federation import Federation

    return Federation(cfg, f, ckpt, resumed).run(engine)
