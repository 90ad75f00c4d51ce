"""A federated run's state on disk, after every round, and its resume.

After each round the run dir gets, atomically: `checkpoints/last.ckpt`, a Lightning checkpoint
of the global model with the run config (as train.py's) and, under `STATE_KEY`, what resuming
needs (the last finished round, the history so far, the partitions' digest, the driver's RNG
states); `global.ckpt`, the same file (a hard link); `history.csv` / `history.png`.
`ckpt_path=last|<run dir>` reads last.ckpt back with `weights_only=True` and continues at the
next round. Client sampling and seeds are functions of (seed, round), the partitions of (seed,
data), so with the RNG states restored the resumed rounds run as they would have without the
stop. The run dir also gets the per-client class histogram (client_classes.csv/.png)."""

import csv
import hashlib
import io
import os
import random
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from litlab.checkpointing.run_config import CONFIG_KEY
from litlab.checkpointing.trust import shown
from litlab.errors import UserError, one_line

STATE_KEY = "litlab_federated"
#: keys of the run config that may differ on resume: they do not change what is computed
FREE = (
    *((k,) for k in ("paths", "hydra", "extras", "ckpt_path", "tags", "task_name", "threads")),
    ("federate", "verbose"),
    ("federate", "backend"),
)
#: the settings a resume takes from the run (unless this command sets them otherwise)
ROOTS = ("data", "model", "trainer", "callbacks", "federate", "seed", "optimized_metric")
#: the targets a resumed run's file may set outside data and model: the kind built there
TARGETS = {
    "trainer": (("lightning.pytorch", "Trainer"),),
    "federate.strategy": (("flwr.serverapp.strategy", "Strategy"),),
}
MAX_ROUNDS = 1_000_000
Count = Annotated[int, Field(ge=0, le=10**15)]
Metrics = dict[Annotated[str, Field(max_length=200)], float]


class _Plain(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class RoundRecord(_Plain):
    """One finished round, as `server.Recorded` writes it."""

    round: Annotated[int, Field(ge=1, le=MAX_ROUNDS)]
    clients: Count
    failed: Count
    failures: Annotated[str, Field(max_length=1_000_000)]
    bytes_sent: Count
    bytes_uncompressed: Count
    train_s: Annotated[float, Field(ge=0, le=1e9)]


class RunState(_Plain):
    """What `save` stores under STATE_KEY: every round up to `round` recorded and tested."""

    round: Annotated[int, Field(ge=0, le=MAX_ROUNDS)]
    rounds: list[RoundRecord]
    central: dict[int, Metrics]
    clients: dict[int, Metrics] = {}
    partitions: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    rng: dict[Literal["python", "numpy", "torch"], Any]

    @model_validator(mode="after")
    def _every_round(self):
        done = list(range(1, self.round + 1))
        if [r.round for r in self.rounds] != done:
            raise ValueError(f"rounds are not the rounds 1 to {self.round}")
        if sorted(self.central) != [0, *done]:
            raise ValueError(f"central holds not the rounds 0 to {self.round}")
        if not set(self.clients) <= set(done) or len(self.rng) != 3:
            raise ValueError("clients or rng hold other entries")
        return self


def digest(parts: dict[str, list[list[int]]]) -> str:
    """SHA-256 of the clients' training parts, then their held-out parts."""
    h = hashlib.sha256()
    for p in parts["train"] + parts["heldout"]:
        h.update(np.asarray(p, dtype=np.int64).tobytes() + b"|")
    return h.hexdigest()


def global_rng_state() -> dict:
    """Python's, numpy's and torch's CPU RNG states, as tensors and plain values (the driver
    draws on no GPU)."""
    import torch

    from litlab.checkpointing.resume_state import rng_state

    return rng_state((torch.get_rng_state(), None))


def save(trainer, run_dir: Path, state: dict) -> Path:
    """checkpoints/last.ckpt and global.ckpt of the model the trainer last tested."""
    from litlab.checkpointing.atomic_io import AtomicCheckpointIO
    from litlab.compat.lightning import checkpoint_connector

    checkpoint = checkpoint_connector(trainer).dump_checkpoint(weights_only=False)
    checkpoint[STATE_KEY] = state
    last = run_dir / "checkpoints" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint(checkpoint, last)
    tmp = run_dir / ".global.ckpt.link"
    tmp.unlink(missing_ok=True)
    try:
        os.link(last, tmp)
    except OSError:  # file systems without hard links: a copy
        import shutil

        shutil.copyfile(last, tmp)
    os.replace(tmp, run_dir / "global.ckpt")
    return run_dir / "global.ckpt"


def load_resumed(path: Path) -> tuple[dict, dict]:
    """(checkpoint, federated state) of a run to resume; one line when it is not one. The
    state is data: its fields are checked (`RunState`, `_check_rng`) before any is used."""
    from litlab.checkpointing.load import load as load_checkpoint

    ckpt = load_checkpoint(path)
    state = ckpt.get(STATE_KEY)
    if not isinstance(state, dict) or not isinstance(state.get("round"), int):
        raise UserError(f"ckpt_path={path} is not a federated run's checkpoint (no round state)")
    try:
        RunState.model_validate(state)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        what = f"{where}={shown(first.get('input'), 60)}: " if where else ""
        raise UserError(
            f"ckpt_path={path}: its round state is not one federate.py writes ({what}"
            f"{first['msg'].removeprefix('Value error, ')})"
        ) from None
    _check_rng(state["rng"], path)
    return ckpt, state


def load_weights(model, ckpt: dict, path) -> None:
    """The global model's weights; one line when they are not this model's."""
    try:
        model.load_state_dict(ckpt["state_dict"])
    except Exception as err:  # noqa: BLE001  (torch: RuntimeError, TypeError, KeyError...)
        raise UserError(
            f"ckpt_path={path}: its weights do not fit the run's model ({one_line(err)})"
        ) from None


def _check_rng(rng: dict, path) -> None:
    """The RNG states, set on throwaway generators: the libraries' own checks, no global one
    touched (a resume sets the real ones just before its first round)."""
    import torch

    try:
        version, internal, gauss = rng["python"]
        random.Random().setstate((version, tuple(internal), gauss))
        kind, keys, pos, has_gauss, cached = rng["numpy"]
        np.random.RandomState().set_state(
            (kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached)
        )
        torch.Generator().set_state(rng["torch"])
    except Exception as err:  # noqa: BLE001  (each library raises its own kind)
        raise UserError(
            f"ckpt_path={path}: its RNG state is not one federate.py wrote ({one_line(err)}); "
            "a resume would not continue the same run"
        ) from None


def own_settings(cfg) -> tuple[dict, dict, list[str]]:
    """A resume continues the run as it was started (`python src/federate.py ckpt_path=<run
    dir>`, as printed on a stop): (checkpoint, round state, the keys taken from the run). Its
    settings go into `cfg` where this command does not set them (`resume.adopt`), its stored
    config checked as data first, its data folders moved to this command's (`trust.here`)."""
    from flwr.serverapp.strategy import Strategy  # noqa: F401  (imported: its subclasses match)

    from litlab.checkpointing import atomic_io, resume, trust

    path = Path(cfg.ckpt_path)
    source = str(path)
    atomic_io.check_links(Path(cfg.paths.output_dir))  # it writes there: no way out
    ckpt, resumed = load_resumed(path)
    stored = ckpt[CONFIG_KEY]
    trust.check_is_data(stored, source)  # plain data, only the kinds of targets built from a file
    explicit = resume.explicit_keys() or []
    mine = tuple(k[1] for k in explicit if len(k) == 2 and k[0] == "data")
    stored = trust.here(stored, cfg.paths.data_dir, source, overridden=mine)
    started = _started(path.parents[1])
    taken = resume.adopt(cfg, stored, source, ROOTS, TARGETS, free=FREE, started=started)
    return ckpt, resumed, taken


def federated_resume_command(run_dir: Path) -> str:
    """The command that resumes the run, as a stop prints it: this command's overrides (an
    experiment sets keys no resume could take from the run, e.g. a callback's patience) with
    `ckpt_path` the run dir, as train.py prints its own (`runs.run_end.resume_command`)."""
    from hydra.core.hydra_config import HydraConfig

    from litlab.runs.run_end import resume_command

    task = HydraConfig.get().overrides.task if HydraConfig.initialized() else []
    return resume_command("federate", task, run_dir)


def _started(run_dir: Path) -> str:
    """`(it was started with: ...)` from the run's .hydra/overrides.yaml: a file of the run,
    read as data (a list of short strings) or left out."""
    import yaml

    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    try:
        args = yaml.safe_load(path.read_text()[:20_000]) if path.is_file() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ""
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return ""
    args = [a for a in args if not a.startswith("ckpt_path=")]
    return f" (it was started with: {shown(' '.join(args), 300) or 'no overrides'})"


# --------------------------------------------------------------- outputs
COLUMNS = (
    "round",
    "accuracy",
    "loss",
    "clients",
    "failed",
    "bytes_sent",
    "bytes_uncompressed",
    "train_s",
    "failures",
)


def history_rows(
    rounds: list[dict], evaluation: dict[int, dict[str, float]], clients: dict | None = None
) -> list[dict]:
    """One row per round (round 0: the initial global model): central test metrics, then the
    clients' own evaluation (`client_<metric>_mean`, `client_<metric>_worst`, ...)."""
    clients = clients or {}
    by_round = {r["round"]: r for r in rounds}
    rows = []
    for rnd in sorted(set(evaluation) | set(by_round)):
        metrics = evaluation.get(rnd, {})
        row = {
            "round": rnd,
            "accuracy": metrics.get("test/acc", np.nan),
            "loss": metrics.get("test/loss", np.nan),
            **dict.fromkeys(("clients", "failed", "bytes_sent", "bytes_uncompressed"), 0),
            "train_s": 0.0,
            "failures": "",
        }
        row.update({k: v for k, v in by_round.get(rnd, {}).items() if k in COLUMNS})
        row.update({k: v for k, v in metrics.items() if k not in ("test/acc", "test/loss")})
        row.update(clients.get(rnd, {}))
        rows.append(row)
    return rows


def write_history(out: Path, rows: list[dict], metric: str = "acc") -> None:
    from litlab.checkpointing.atomic_io import write_atomic

    extra = sorted({k for r in rows for k in r} - set(COLUMNS))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=[*COLUMNS, *extra], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(out / "history.csv", lambda f: f.write(text.getvalue().encode()))
    from matplotlib.figure import Figure  # no pyplot: no backend to choose, no figure to close

    fig = Figure(figsize=(10, 3.5))
    acc, sent = fig.subplots(1, 2)
    x = [r["round"] for r in rows]
    central = "accuracy" if metric == "acc" else f"test/{metric}"
    acc.plot(x, [r.get(central, np.nan) for r in rows], marker="o", label="global, central test")
    mean, worst = f"client_{metric}_mean", f"client_{metric}_worst"
    if any(mean in r for r in rows):
        acc.plot(x, [r.get(mean, np.nan) for r in rows], marker=".", label="clients, weighted mean")
        acc.plot(x, [r.get(worst, np.nan) for r in rows], ls="--", label="worst client")
        acc.legend(fontsize="small")
    acc.set(xlabel="round", ylabel=f"test {metric}", title="Global model")
    acc.grid(alpha=0.3)
    sent.bar(x, [r["bytes_sent"] / 1e6 for r in rows])
    sent.set(xlabel="round", ylabel="MB sent by clients", title="Communication")
    fig.tight_layout()
    write_atomic(out / "history.png", lambda f: fig.savefig(f, format="png", dpi=100))


def write_class_histogram(out: Path, counts: np.ndarray) -> None:
    """client_classes.csv (clients x classes) and a stacked bar chart of it."""
    with open(out / "client_classes.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["client", *[f"class_{c}" for c in range(counts.shape[1])], "total"])
        for client, row in enumerate(counts):
            writer.writerow([client, *row.tolist(), int(row.sum())])
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(5, 0.45 * len(counts) + 2), 3.5))
    ax = fig.subplots()
    bottom = np.zeros(len(counts))
    for c in range(counts.shape[1]):
        ax.bar(np.arange(len(counts)), counts[:, c], bottom=bottom, label=str(c))
        bottom += counts[:, c]
    ax.set(xlabel="client", ylabel="training samples", title="Classes per client")
    ax.legend(title="class", fontsize="small", ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "client_classes.png", dpi=100)


def print_summary(
    out: Path, rows: list[dict], checkpoint: Path | None, seconds: float, metric: str = "acc"
) -> str:
    done = [r for r in rows if r["round"] > 0]
    last = rows[-1]
    key = "accuracy" if metric == "acc" else f"test/{metric}"
    mean, worst = f"client_{metric}_mean", f"client_{metric}_worst"
    sent = sum(r["bytes_sent"] for r in done)
    dense = sum(r["bytes_uncompressed"] for r in done)
    failed = sum(r["failed"] for r in done)
    lines = [
        "",
        "Federated results",
        f"  rounds           {len(done)} ({seconds:.1f} s in this process)",
        (
            f"  {'test/' + metric:<16} {last[key]:.4f} (round 0: {rows[0][key]:.4f}, "
            f"best {max(r[key] for r in rows):.4f})"
        ),
        f"  test/loss        {last['loss']:.4f}",
        *(
            [f"  clients' {metric:<7} {last[mean]:.4f} weighted mean, {last[worst]:.4f} worst"]
            if mean in last
            else []
        ),
        (
            f"  sent by clients  {sent / 1e6:.2f} MB"
            + (f" ({1 - sent / dense:.0%} less than uncompressed)" if dense else "")
        ),
        f"  failed updates   {failed}",
        "Files",
        f"  run dir          {out}",
        f"  history          {out / 'history.csv'} (.png)",
        f"  classes          {out / 'client_classes.csv'} (.png)",
        f"  checkpoint       {checkpoint or '(none written)'}",
    ]
    return "\n".join(lines)
