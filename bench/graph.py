"""GCN (or GAT) on Cora: one fit epoch of the template vs a hand-written PyG loop, same process.

    PYTHONPATH=src python bench/graph.py [--experiment gcn_cora|gat_cora] [--epochs N] [--repeats N]
                                         [--threads N]

Both sides run the same net (litlab's GNN as the experiment configures it), optimizer and data,
and per epoch do one full-batch training step and one evaluation of the validation nodes. The
template side is `experiment=gcn_cora` (or gat_cora) as `src/train.py` builds it, with its default
callbacks (checkpointing, early stopping, CSV logger); only the progress bar is off. Each Trainer
epoch is paired with a hand-written epoch run just before it (the first pair of each repetition
is left out: warm-up); the bar applies to the median per-pair ratio of CPU time: <= 1.20. Then
the loop as a minimal LightningModule with everything off: Lightning's own floor; the second bar
is the template's ratio over this one's: <= 1.10 (issue 37). The last row is that minimal module
with the fast path for `self.log` that litlab installs while its own modules fit
(`compat.lightning.quick_result_moves`): what plain Lightning would gain from it too. Needs
Cora's raw files in <data_dir>/Planetoid/Cora/raw (default: ../shared/data copied to a temp dir).
Every side runs at `--threads` torch threads (default 1): at one thread a process's CPU time is
the work it did; with more, OpenMP's waiting threads spin, and their CPU time depends on what
runs after each parallel region more than on the loop (compare the wall columns then).
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import fit_template, plain_trainer, train_config

ROOT = Path(__file__).resolve().parents[1]
BAR = 1.20
BAR_VS_LIGHTNING = 1.10


def clocks() -> tuple[float, float]:
    """(wall, CPU) seconds: on a shared machine the CPU time of this process is the steadier."""
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    now = clocks()
    return now[0] - start[0], now[1] - start[1]


NETS = {  # the nets of configs/model/{gnn,gat}.yaml as the experiments use them
    "gcn_cora": {"conv": "gcn", "hidden_channels": 16, "dropout": 0.5, "lr": 0.01},
    "gat_cora": {
        "conv": "gat",
        "hidden_channels": 64,
        "heads": 8,
        "dropout": 0.6,
        "attention_dropout": 0.6,
        "value_dropout": 0.6,
        "act": "elu",
        "lr": 0.005,
    },
}


class HandWritten:
    """The loop of PyG's examples/gcn.py: a step, then validation accuracy, best val kept."""

    def __init__(self, experiment: str, data_dir: Path):
        import torch
        from torch_geometric.datasets import Planetoid
        from torch_geometric.transforms import NormalizeFeatures

        from litlab.domains.graph.nets import GNN

        torch.manual_seed(0)
        self.data = Planetoid(str(data_dir / "Planetoid"), "Cora", transform=NormalizeFeatures())[0]
        settings = dict(NETS[experiment])
        lr = settings.pop("lr")
        self.net = GNN(self.data.num_features, 7, **settings)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=lr, weight_decay=5e-4)
        self.best = 0.0

    def epoch(self) -> tuple[float, float]:
        import copy

        import torch
        import torch.nn.functional as F

        data, start = self.data, clocks()
        self.net.train()
        self.opt.zero_grad()
        out = self.net(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        self.opt.step()
        self.net.eval()
        with torch.no_grad():
            out = self.net(data.x, data.edge_index)
            val_loss = F.cross_entropy(out[data.val_mask], data.y[data.val_mask])
            acc = (out[data.val_mask].argmax(1) == data.y[data.val_mask]).float().mean()
        if acc > self.best:
            self.best, self.state = acc.item(), copy.deepcopy(self.net.state_dict())
        float(loss), float(val_loss)
        return since(start)


def paired_timer(hand: HandWritten):
    """A callback that runs one hand-written epoch, then times the Trainer's next epoch (train
    step and validation; the checkpoint writes come after it: Lightning runs them last)."""
    import lightning as L

    class PairedEpochs(L.Callback):
        def __init__(self):
            self.pairs = []

        def on_train_epoch_start(self, trainer, module):
            self.hand = hand.epoch()
            self.start = clocks()

        def on_train_epoch_end(self, trainer, module):
            self.pairs.append((self.hand, since(self.start)))

    return PairedEpochs()


def template_pairs(
    experiment: str, data_dir: Path, epochs: int, out: Path, bare: bool = False
) -> list:
    """The template's fit as train.py builds it; `bare`: no callbacks and no logger."""
    callbacks = (
        ["callbacks=none", "logger=[]"]
        if bare
        else ["callbacks.rich_progress_bar=null", "callbacks.model_summary=null"]
    )
    cfg = train_config(
        [
            f"experiment={experiment}",
            f"trainer.max_epochs={epochs}",
            "seed=0",
            f"paths.data_dir={data_dir}",
            "extras.print_config=false",
            "+trainer.enable_progress_bar=false",
            "trainer.num_sanity_val_steps=0",
            "+trainer.enable_model_summary=false",
            *callbacks,
        ],
        out,
    )
    timer = paired_timer(HandWritten(experiment, data_dir))
    fit_template(cfg, timer)
    return timer.pairs[1:]


def plain_lightning_pairs(experiment: str, data_dir: Path, epochs: int, quick=False) -> list:
    """The floor: the same loop as a minimal LightningModule (PyG's Lightning examples: log the
    train loss and the validation accuracy), Trainer with checkpoints, logger and bars off.
    `quick`: with litlab's fast path for `self.log` installed around the fit."""
    import lightning as L
    import torch
    import torch.nn.functional as F

    from litlab.domains.graph.nets import GNN

    settings = dict(NETS[experiment])
    lr = settings.pop("lr")
    hand = HandWritten(experiment, data_dir)
    data = hand.data

    class Minimal(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = GNN(data.num_features, 7, **settings)

        def training_step(self, batch, batch_idx):
            out = self.net(batch.x, batch.edge_index)
            loss = F.cross_entropy(out[batch.train_mask], batch.y[batch.train_mask])
            self.log("train_loss", loss, batch_size=1)
            return loss

        def validation_step(self, batch, batch_idx):
            out = self.net(batch.x, batch.edge_index)
            acc = (out[batch.val_mask].argmax(1) == batch.y[batch.val_mask]).float().mean()
            self.log("val_acc", acc, batch_size=1)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=lr, weight_decay=5e-4)

    from litlab.compat.lightning import quick_result_moves

    loader = torch.utils.data.DataLoader([data], batch_size=1, collate_fn=lambda items: items[0])
    timer = paired_timer(hand)
    if quick:
        quick_result_moves(install=True)
    try:
        plain_trainer(epochs, timer).fit(Minimal(), loader, loader)
    finally:
        if quick:
            quick_result_moves(install=False)
    return timer.pairs[1:]


def _count(low: int, high: int | None = None):
    """An argparse type: an integer in [low, high], refused in argparse's one line otherwise."""

    def parse(text: str) -> int:
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer {bound}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer {bound}")
        return value

    return parse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", choices=sorted(NETS), default="gcn_cora")
    # the first epoch of each side is dropped (warm-up): two are the fewest that time anything
    parser.add_argument("--epochs", type=_count(2), default=20)
    parser.add_argument("--repeats", type=_count(1), default=3)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument(
        "--threads",
        type=_count(1, os.cpu_count() or 1),
        default=1,
        help="torch threads of every side (1 to this machine's cores)",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data_dir = args.data_dir
        if data_dir is None:
            shutil.copytree(ROOT.parent / "shared" / "data" / "Planetoid", tmp / "Planetoid")
            data_dir = tmp
        HandWritten(args.experiment, data_dir)  # process Cora once
        ex, sides = (
            args.experiment,
            {
                "template (train.py)": [],
                "template, callbacks=none logger=[]": [],
                "plain Lightning (minimal module)": [],
                "plain Lightning + litlab's self.log fast path": [],
            },
        )
        for rep in range(args.repeats):
            runs = list(sides.values())
            runs[0] += template_pairs(ex, data_dir, args.epochs, tmp / f"run{rep}")
            runs[1] += template_pairs(ex, data_dir, args.epochs, tmp / f"bare{rep}", bare=True)
            runs[2] += plain_lightning_pairs(ex, data_dir, args.epochs)
            runs[3] += plain_lightning_pairs(ex, data_dir, args.epochs, quick=True)
    print(
        f"{ex}, {args.repeats} x {args.epochs} epochs (train step + validation), each paired "
        f"with a hand-written epoch run just before it, {args.threads} torch thread(s); "
        f"medians, wall and CPU of this process:"
    )
    median = statistics.median
    ratios = {}
    for name, pairs in sides.items():
        hand_wall, hand_cpu = (median(h[i] for h, _ in pairs) for i in (0, 1))
        wall, cpu = (median(t[i] for _, t in pairs) for i in (0, 1))
        ratio_wall, ratio_cpu = (median(t[i] / h[i] for h, t in pairs) for i in (0, 1))
        ratios[name] = ratio_cpu
        print(
            f"  {name:<36} wall {wall * 1e3:6.2f} ms vs {hand_wall * 1e3:6.2f} ms "
            f"({ratio_wall:4.2f}x)   CPU {cpu * 1e3:6.2f} vs {hand_cpu * 1e3:6.2f} ms "
            f"({ratio_cpu:4.2f}x)"
        )
    t = ratios["template (train.py)"]
    vs = t / ratios["plain Lightning (minimal module)"]
    print(
        f"bar: template CPU time <= {BAR:.2f}x the hand-written loop's (median per-pair "
        f"ratio): {'pass' if t <= BAR else 'FAIL'} ({t:.2f}x)\n"
        f"bar: template <= {BAR_VS_LIGHTNING:.2f}x plain Lightning (the two ratios above): "
        f"{'pass' if vs <= BAR_VS_LIGHTNING else 'FAIL'} ({vs:.3f}x)"
    )
    return 0 if t <= BAR and vs <= BAR_VS_LIGHTNING else 1


if __name__ == "__main__":
    sys.exit(main())
