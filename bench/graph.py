"""GCN (or GAT) on Cora: one fit epoch of the template vs a hand-written PyG loop, same process.

    python bench/graph.py [--experiment gcn_cora|gat_cora] [--epochs 20] [--repeats 3]

Both sides run the same net (litlab's GNN as the experiment configures it), optimizer and data, and per epoch do
one full-batch training step and one evaluation of the validation nodes. The template side is
`experiment=gcn_cora` (or gat_cora) as `src/train.py` builds it, with its default callbacks (checkpointing
the best and last weights, early stopping, CSV logger); only the progress bar is off. Figures
are the median epoch times (wall and CPU) over the epochs of several interleaved repetitions (the first epoch of
each is left out: warm-up). Bar: template / hand-written <= 1.20. Needs Cora's raw files in
<data_dir>/Planetoid/Cora/raw (default: ../shared/data copied to a temporary folder).
"""
import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BAR = 1.20


def clocks() -> tuple[float, float]:
    """(wall, CPU) seconds: on a shared machine the CPU time of this process is the steadier."""
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    now = clocks()
    return now[0] - start[0], now[1] - start[1]


def compose(overrides: list[str], out: Path):
    """The train config as `python src/train.py overrides` composes it, run dir `out`."""
    from litlab.utils.config import compose as compose_config

    return compose_config("train", overrides, output_dir=out)


def template_epochs(experiment: str, data_dir: Path, epochs: int, out: Path,
                    bare: bool = False) -> list[tuple[float, float]]:
    """Epoch times of the template's fit (train step + validation + callbacks); `bare`: no
    callbacks and no logger, to show what checkpointing and logging cost."""
    import lightning as L

    from litlab.utils import build

    class EpochTimer(L.Callback):
        def __init__(self):
            self.times, self.start = [], 0.0

        def on_train_epoch_start(self, trainer, module):
            self.start = clocks()

        def on_train_epoch_end(self, trainer, module):  # after validation and checkpointing
            self.times.append(since(self.start))

    callbacks = (["callbacks=none", "logger=[]"] if bare else
                 ["callbacks.rich_progress_bar=null", "callbacks.model_summary=null"])
    cfg = compose([f"experiment={experiment}", f"trainer.max_epochs={epochs}", "seed=0",
                   f"paths.data_dir={data_dir}", "extras.print_config=false",
                   "+trainer.enable_progress_bar=false", "trainer.num_sanity_val_steps=0",
                   "+trainer.enable_model_summary=false", *callbacks], out)
    L.seed_everything(0)
    dm = build.datamodule(cfg)
    model = build.model(cfg, dm)
    timer = EpochTimer()
    trainer = build.trainer(cfg, extra_callbacks=[timer])
    trainer.fit(model, datamodule=dm)
    return timer.times[1:]


NETS = {  # the nets of configs/model/{gnn,gat}.yaml as the experiments use them
    "gcn_cora": dict(conv="gcn", hidden_channels=16, dropout=0.5, lr=0.01),
    "gat_cora": dict(conv="gat", hidden_channels=64, heads=8, dropout=0.6,
                     attention_dropout=0.6, act="elu", lr=0.005),
}


def hand_written_epochs(experiment: str, data_dir: Path, epochs: int) -> list[tuple]:
    """The loop of PyG's examples/gcn.py: a step, then validation accuracy, best val kept."""
    import copy

    import torch
    import torch.nn.functional as F
    from torch_geometric.datasets import Planetoid
    from torch_geometric.transforms import NormalizeFeatures

    from litlab.models.nets.gnn import GNN

    torch.manual_seed(0)
    data = Planetoid(str(data_dir / "Planetoid"), "Cora", transform=NormalizeFeatures())[0]
    settings = dict(NETS[experiment])
    lr = settings.pop("lr")
    net = GNN(data.num_features, 7, **settings)
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=5e-4)
    times, best = [], 0.0
    for _ in range(epochs):
        start = clocks()
        net.train()
        opt.zero_grad()
        out = net(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        net.eval()
        with torch.no_grad():
            out = net(data.x, data.edge_index)
            val_loss = F.cross_entropy(out[data.val_mask], data.y[data.val_mask])
            acc = (out[data.val_mask].argmax(1) == data.y[data.val_mask]).float().mean()
        if acc > best:
            best, state = acc.item(), copy.deepcopy(net.state_dict())  # noqa: F841
        float(loss), float(val_loss)
        times.append(since(start))
    return times[1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", choices=sorted(NETS), default="gcn_cora")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
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
        hand_written_epochs(args.experiment, data_dir, 3)  # process Cora once, warm up
        template, bare, hand = [], [], []
        for rep in range(args.repeats):
            ex = args.experiment
            template += template_epochs(ex, data_dir, args.epochs, tmp / f"run{rep}")
            bare += template_epochs(ex, data_dir, args.epochs, tmp / f"bare{rep}", bare=True)
            hand += hand_written_epochs(ex, data_dir, args.epochs)
    print(f"{args.experiment}, {args.repeats} x {args.epochs} epochs, median epoch (train step + "
          f"validation), wall and CPU time of this process:")
    ratios = []
    for name, runs in (("hand-written PyG loop", hand), ("template (train.py)", template),
                       ("template, callbacks=none logger=[]", bare)):
        wall, cpu = (statistics.median(t[i] for t in runs) for i in (0, 1))
        hand_wall, hand_cpu = (statistics.median(t[i] for t in hand) for i in (0, 1))
        ratios.append(cpu / hand_cpu)
        print(f"  {name:<36} wall {wall * 1e3:7.2f} ms ({wall / hand_wall:4.2f}x)   "
              f"CPU {cpu * 1e3:7.2f} ms ({cpu / hand_cpu:4.2f}x)")
    t = ratios[1]
    print(f"bar: template CPU time <= {BAR:.2f}x the hand-written loop's: "
          f"{'pass' if t <= BAR else 'FAIL'} ({t:.2f}x)")
    return 0 if t <= BAR else 1


if __name__ == "__main__":
    sys.exit(main())
