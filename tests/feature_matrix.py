"""The feature x domain matrix: every after-training feature on every domain's default
experiment, run as a user runs them (subprocesses of src/*.py), written to docs/matrix.md.

    .venv/bin/python tests/feature_matrix.py                       # all of it (~45 min on 2 cores)
    .venv/bin/python tests/feature_matrix.py --rows digits_cnn --columns train,eval
    .venv/bin/python tests/feature_matrix.py --commands --rows gcn_cora   # print a row's commands

Results are kept in a JSON file (--results) and merged, so rows or columns can be rerun; the
markdown is written from all the results kept. tests/test_matrix.py runs the digits row's cells and
one row of each other task kind (slow), with --quick and --in-process (the cells whose process
is not what they show run inside the test's process: matrix_cells.Ctx.in_process)."""

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # run as a script: the sibling module

import matrix_cells as cells

ROOT = cells.ROOT
SHARED = Path(os.environ.get("LITLAB_SHARED_DATA", ROOT.parent / "shared" / "data"))


@dataclass
class Row:
    name: str
    label: str
    train: list[str]  # train.py overrides (the domain's default experiment, fewer epochs)
    short: list[str] = field(default_factory=lambda: ["trainer.max_epochs=1"])  # inspect, compress
    compress: list[str] | None = None  # compress.py overrides (None: `short`)
    needs: str | None = None  # a folder of the shared data (the row is skipped without it)
    federate: list[str] = field(default_factory=list)  # federate.py overrides of the row
    tune: list[str] = field(default_factory=list)  # the tune=lr cell's extra train.py overrides
    export: list[str] = field(default_factory=list)  # the export cells' extra export.py overrides
    # formats one export.py run writes for each export cell among them (--quick: one run)
    export_together: tuple[str, ...] = ()

    @property
    def federate_args(self) -> list[str]:
        """The row's data and model groups, without train.py's epochs."""
        return [a for a in self.train if not a.startswith(("trainer.", "callbacks."))]


def rows(shared: Path) -> list[Row]:
    """The rows; those that need real data read it from paths.data_dir (LITLAB_DATA_DIR: a copy
    of `shared`, made by `main`), as a user's copy is read (docs/matrix.md says so)."""
    nifti = ["data.num_workers=0", "data.persistent_workers=false"]
    return [
        Row("digits_cnn", "digits, CNN (default)", ["trainer.max_epochs=5"]),
        Row(
            "digits_resnet18",
            "digits, ResNet-18",
            ["experiment=digits_resnet18", "trainer.max_epochs=2"],
            ["trainer.max_epochs=1", "trainer.limit_train_batches=10"],
        ),
        Row("unet3d_phantoms", "phantoms, UNet3D", ["model=unet3d", "trainer.max_epochs=3"]),
        Row("resnet3d_phantoms", "phantoms, ResNet3D", ["model=resnet3d", "trainer.max_epochs=3"]),
        Row(
            "unet3d_hippocampus",
            "Hippocampus NIfTI, UNet3D",
            [
                "experiment=unet3d_hippocampus",
                *nifti,
                "trainer.max_epochs=2",
                "trainer.limit_train_batches=40",
            ],
            ["trainer.max_epochs=1", "trainer.limit_train_batches=10"],
            needs="Hippocampus",
        ),
        Row(
            "resnet3d_hippocampus",
            "Hippocampus NIfTI, ResNet3D",
            [
                "model=resnet3d",
                "data=nifti",
                "data.root=${paths.data_dir}/Hippocampus",
                *nifti,
                "trainer.max_epochs=1",
            ],
            needs="Hippocampus",
        ),
        Row(
            "unet2d_hippocampus2d",
            "Hippocampus slices, UNet2D (2D segmentation)",
            [
                "experiment=unet2d_hippocampus",
                "trainer.max_epochs=2",
                "trainer.limit_train_batches=60",
            ],
            ["trainer.max_epochs=1", "trainer.limit_train_batches=20"],
            needs="Hippocampus",
        ),
        Row("gcn_cora", "Cora, GCN", ["experiment=gcn_cora"], compress=[], needs="Planetoid"),
        Row(
            "gat_cora",
            "Cora, GAT",
            ["experiment=gat_cora", "trainer.max_epochs=200"],
            ["trainer.max_epochs=20"],
            compress=[],
            needs="Planetoid",
        ),
        Row(
            "gin_mutag",
            "MUTAG, GIN",
            ["experiment=gin_mutag", "trainer.max_epochs=50"],
            ["trainer.max_epochs=5"],
            needs="TUDataset",
        ),
        Row(
            "gin_proteins",
            "PROTEINS, GIN",
            ["model=gin", "data=proteins", "trainer.max_epochs=20"],
            ["trainer.max_epochs=3"],
            needs="TUDataset",
        ),
        Row(
            "mlp_diabetes",
            "diabetes table, MLP (regression)",
            ["experiment=diabetes"],
            ["trainer.max_epochs=10"],
        ),
        Row(
            "gcn_sbm",
            "SBM graph, GCN (model=gnn)",
            ["model=gnn", "trainer.max_epochs=100"],
            ["trainer.max_epochs=20"],
        ),
    ]


# --quick, the slow test's settings: the same commands with less timing, searching and
# starting in them. Compression reports and exports time batch size 1 for 0.2 s (a 3D row's
# default latency table, batch 64 included, was ~10 of an export cell's 32 s alone) and
# compression writes no fp32 ONNX file (the int8 one is still written and judged). One
# export.py run writes and judges the formats a CPU exports (export.py's default `formats`),
# and each of their cells reads its own format's row of that run's report: each run of
# export.py starts torch, rebuilds the run and scores the checkpoint's test split (~10 s of a
# graph row's 11 s cell). Federated clients train one local epoch, in one Ray worker (each
# worker process starts torch and litlab: ~9 s); the lr finder searches 20 steps and the
# training after it has the inspect cell's epochs. The rows keep their data: with half the
# phantoms the UNet3D row's test Dice fell from ~0.81 to ~0.44 (6 CPU seconds less) and the
# ResNet3D row's model was at chance. Each cell still runs its feature end to end; only
# docs/matrix.md's figures need the full settings. The inspect cell's and the compress cells'
# short trainings (pictures drawn, a pruned net fine-tuned, a student fitted: each then tested
# on the whole test split) stop after QUICK_SHORT_BATCHES batches an epoch (a UNet3D epoch is
# 34); the tune=lr cell keeps its epoch: the lr finder searches within it.
QUICK_SHORT_BATCHES = 8
QUICK_COMPRESS = ["report.onnx=false", "report.batch_sizes=[1]", "report.budget_s=0.2"]
QUICK_EXPORT = ["latency.batch_sizes=[1]", "latency.budget_s=0.2"]
QUICK_EXPORT_TOGETHER = ("onnx", "pt2", "onnx_int8")
QUICK_FEDERATE = ["federate.local_epochs=1", "federate.backend.init_args.num_cpus=1"]


def quick(row: Row) -> Row:
    compress = row.short if row.compress is None else row.compress
    limit = [f"trainer.limit_train_batches={QUICK_SHORT_BATCHES}"]
    short, compress = ([*s, *limit] if _unlimited(s) else s for s in (row.short, compress))
    return replace(
        row,
        short=short,
        compress=[*compress, *QUICK_COMPRESS],
        federate=[*row.federate, *QUICK_FEDERATE],
        tune=[*row.tune, *row.short, "tune.lr_find.num_training=20"],
        export=[*row.export, *QUICK_EXPORT],
        export_together=QUICK_EXPORT_TOGETHER,
    )


def _unlimited(overrides: list[str]) -> bool:
    """No limit of the training's batches among `overrides` yet (Hydra takes one value)."""
    return not any(o.startswith("trainer.limit_train_batches=") for o in overrides)


COLUMNS = {
    "train": None,  # special: gives the row its checkpoint
    "eval": cells.evaluate,
    "inspect": cells.inspect,
    "export onnx": cells.export("onnx"),
    "export pt2": cells.export("pt2"),
    "export onnx_int8": cells.export("onnx_int8"),
    "export tensorrt": cells.export("tensorrt"),
    "serve": cells.serve,
    "prune": cells.compress("prune"),
    "distill": cells.compress("distill"),
    "quantize": cells.compress("quantize"),
    "federate": cells.federate,
    "tune=lr": cells.tune_lr,
}


def copy_data(shared: Path, dst: Path) -> Path:
    """Writable copies of the shared real data (read-only there), as LITLAB_DATA_DIR."""
    for name in ("Planetoid", "TUDataset", "Hippocampus"):
        if (shared / name).is_dir() and not (dst / name).exists():
            shutil.copytree(shared / name, dst / name)
    for path in dst.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    return dst


def outside_writes(before: set[str]) -> list[str]:
    return sorted(line[3:] for line in cells.git_status() - before if "__pycache__" not in line)


# --in-process: the rows whose federate cell still starts Flower's Ray simulation, as a user's
# federate.py does; the others call their clients in the test's process
# (`matrix_cells.Ctx.federate_here`). MUTAG's clients read real data from LITLAB_DATA_DIR in
# Ray's workers; Ray's own promises (signals, kill -9, failing clients, sweeps, no process
# left) are tests/test_federated_ray.py's on digits, and test_start.py's new signal kind
# federates through Ray too.
RAY_ROWS = ("gin_mutag",)


def run_row(
    row: Row, columns: list[str], work: Path, env: dict, log=print, save=None, in_process=False
) -> dict:
    """Each column's Cell for `row`; the train cell first (the others use its checkpoint).
    `in_process`: the cells that may run in this process do (`matrix_cells.Ctx.in_process`)."""
    here = in_process and row.name not in RAY_ROWS
    ctx = cells.Ctx(work / row.name / "logs", env, in_process=in_process, federate_here=here)
    out = {}
    before = cells.git_status()
    train = cells.train(row, ctx)
    ctx.ckpt = train.path
    out["train"] = train
    log(
        f"{row.name:22s} train            {train.status:8s} {train.text} ({train.seconds:.0f} s)",
        flush=True,
    )
    for name in columns:
        if name == "train":
            continue
        if train.status != "ok":
            cell = cells.Cell("n/a", f"no checkpoint (train: {train.status})")
        else:
            try:
                cell = COLUMNS[name](row, ctx)
            except Exception as err:  # noqa: BLE001 (a bug of the runner: still one cell)
                cell = cells.Cell("FAILED", f"runner: {type(err).__name__}: {err}")
        if stray := outside_writes(before):
            cell = cells.Cell(
                "FAILED", f"wrote outside its run dir: {', '.join(stray)}", cell.seconds
            )
            before = cells.git_status()
        out[name] = cell
        if save is not None:  # after every cell: an interrupted matrix keeps what it ran
            save({k: v.as_dict() for k, v in out.items()})
        log(
            f"{row.name:22s} {name:16s} {cell.status:8s} {cell.text} ({cell.seconds:.0f} s)",
            flush=True,
        )
    return {k: v.as_dict() for k, v in out.items()}


INTRO = """\
# Feature x domain matrix

Every after-training feature on every domain's default experiment, run as a user runs
them: `tests/feature_matrix.py` calls `src/train.py`, `eval.py`, `export.py`, `serve.py`
(one real HTTP request), `compress.py`, `federate.py` in subprocesses and writes this page
from what they printed and wrote. A cell is `ok` (with the metric or size it produced),
`refused` (the one line the command printed, exit 2, before any work) or `FAILED`.
Trainings are short (epochs below), so metrics are those of short runs, not of the
published recipes; `prune` is structured pruning to half the parameters
(`compress.prune.ratio=0.5`). Regenerate: `.venv/bin/python tests/feature_matrix.py` (about 45
minutes on 2 cores; the slow tests run the digits row and one row of each other task
kind: `pytest -m slow tests/test_matrix.py`). Every cell runs with `OMP_NUM_THREADS=1`: one
thread, so its figures do not depend on the machine's load (`threads=auto` reads it, and
float sums in another order change the last digits, or a short run's best epoch). A cell marked `not run` was not reached by the
run that wrote this page (rerun its row: `--rows NAME`); seconds are wall time on the
machine named at the end, which tells more about its load than about litlab.

**Following a row by hand.** Each row below lists its cells' commands, in order. The train
command prints its best checkpoint (`checkpoint  logs/train/runs/<time>/checkpoints/...`): set
`CKPT` to it; `export onnx` writes `model.onnx` in the run dir it prints: set `ONNX` to it
(and `PORT` to a free port for `serve`, which then answers a `POST /predict`). Each compress
step's checkpoint (`*_prune.ckpt`, `*_distill.ckpt`) is then read by `eval.py
ckpt_path=<it>`. The runner adds only console settings (`extras.print_config=false`, and
`callbacks.rich_progress_bar=null` where there is a callbacks group) and its own
`paths.log_dir`; set `export OMP_NUM_THREADS=1` first to get its figures. Rows on real data read it below `paths.data_dir` (default `data/`, or
`LITLAB_DATA_DIR`): copy the folder named in the row there (`cp -r ../shared/data/Planetoid
data/`; the copy may stay read-only: PyG's processed files go to `data/cache/pyg/`), or pass
`paths.data_dir=FOLDER` where it is. `tests/feature_matrix.py --commands --rows NAME` prints
a row's commands; `--rows NAME --columns train,eval` runs those cells of it (the train cell
always, for its checkpoint)."""

# what a command of the page leaves for the next ones (see INTRO)
AFTER = {"train": "CKPT= its checkpoint", "export onnx": "ONNX= its model.onnx"}


def _shell(arg: str) -> str:
    """An argument as a shell takes it: the page's variables expanded, everything else (Hydra's
    `${paths.data_dir}`, `formats=[onnx]`) quoted."""
    if any(var in arg for var in ("$CKPT", "$ONNX", "$PORT")):
        return f'"{arg}"'
    return shlex.quote(arg)


def commands(row: Row) -> list[str]:
    """Each cell's command line of `row`, in the order the runner runs them."""
    lines = []
    for column in COLUMNS:
        script, args = cells.command(column, row)
        line = " ".join(["python", f"src/{script}", *map(_shell, args)])
        lines.append(f"{line}  # {column}" + (f"; {AFTER[column]}" if column in AFTER else ""))
    return lines


def _row_text(row: Row) -> list[str]:
    """A row's heading, the data it needs and its commands."""
    data = (
        f"Data: `<paths.data_dir>/{row.needs}` (`cp -r ../shared/data/{row.needs} data/`)."
        if row.needs
        else "Data: none to copy (made or shipped offline)."
    )
    return ["", f"## {row.label}", "", data, "", "```bash", *commands(row), "```", ""]


def render(results: dict, all_rows: list[Row]) -> str:
    """docs/matrix.md: one table of statuses, then each row's commands and cells in full."""
    mark = {
        "ok": "ok",
        "refused": "refused",
        "FAILED": "**FAILED**",
        "n/a": "n/a",
        "skipped": "skipped",
    }
    cols = list(COLUMNS)
    lines = [
        INTRO,
        "",
        "| domain | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for row in all_rows:  # a row not run yet: all its cells `not run`
        got = results.get(row.name, {})
        lines.append(
            f"| {row.label} | "
            + " | ".join(mark.get(got.get(c, {}).get("status"), "not run") for c in cols)
            + " |"
        )
    for row in all_rows:
        got = results.get(row.name)
        if not got:
            continue
        lines += _row_text(row)
        lines += ["| feature | status | result | s |", "|---|---|---|---|"]
        for c in cols:
            cell = got.get(c, {"status": "not run", "text": "not run yet", "seconds": 0})
            text = cell["text"].replace("|", "\\|")
            lines.append(f"| {c} | {cell['status']} | {text} | {cell['seconds']:.0f} |")
    lines += ["", _generated(results, all_rows), ""]
    return "\n".join(lines)


def _generated(results: dict, all_rows) -> str:
    """The page's last line: when, and the commit of the tree every shown cell ran on (each
    row's commits where they differ: rows rerun later name theirs)."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    by_row = {
        row.label: sorted({c.get("commit", "unrecorded") for c in results[row.name].values()})
        for row in all_rows
        if results.get(row.name)
    }
    commits = sorted({c for cs in by_row.values() for c in cs})
    if len(commits) == 1:
        where = f"every cell ran on the tree of commit {commits[0]}"
    else:
        where = "the cells ran on the trees of commits " + "; ".join(
            f"{label}: {', '.join(cs)}" for label, cs in by_row.items()
        )
    return f"Generated {when}, on a shared 2-core CPU machine; {where}."


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="all")
    parser.add_argument("--columns", default="all")
    parser.add_argument("--results", default=str(ROOT / "logs" / "matrix" / "results.json"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "matrix.md"))
    parser.add_argument("--shared", default=str(SHARED))
    parser.add_argument("--jobs", type=int, default=1, help="rows run in parallel")
    parser.add_argument("--render-only", action="store_true", help="write --out from --results")
    parser.add_argument("--quick", action="store_true", help="the slow test's shorter settings")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="eval, inspect, tune=lr, the CPU exports and compress inside this process (the "
        "slow test's: no interpreter start-up each); one row at a time",
    )
    parser.add_argument(
        "--commands", action="store_true", help="print the chosen rows' commands, run nothing"
    )
    args = parser.parse_args(argv)
    if args.in_process and args.jobs != 1:  # one process's environment, cwd and stdout
        print(
            f"error: --jobs {args.jobs}: --in-process runs one row at a time (--jobs 1, the default)",
            file=sys.stderr,
        )
        return 2
    shared = Path(args.shared)
    all_rows = [quick(r) for r in rows(shared)] if args.quick else rows(shared)
    chosen = [r for r in all_rows if args.rows == "all" or r.name in args.rows.split(",")]
    if args.commands:
        for row in chosen:
            print("\n".join(_row_text(row)[1:]))
        return 0
    columns = list(COLUMNS) if args.columns == "all" else args.columns.split(",")
    results_path = Path(args.results)
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    if args.render_only:
        Path(args.out).write_text(render(results, all_rows))
        return 0
    with tempfile.TemporaryDirectory(prefix="litlab-matrix-") as tmp:
        work = Path(tmp)
        env = cells.clean_env(copy_data(shared, work / "data"))
        lock = threading.Lock()

        def one(row):
            if row.needs and not (shared / row.needs).is_dir():
                got = {
                    "train": {
                        "status": "skipped",
                        "text": f"{shared / row.needs} absent",
                        "seconds": 0,
                    }
                }
            else:
                got = run_row(
                    row,
                    columns,
                    work,
                    env,
                    save=lambda done: keep(row, done),
                    in_process=args.in_process,
                )
            keep(row, got)

        commit = cells.tree_commit()

        def keep(row, got):
            got = {c: {**cell, "commit": commit} for c, cell in got.items()}
            with lock:
                results[row.name] = {**results.get(row.name, {}), **got}
                results_path.parent.mkdir(parents=True, exist_ok=True)
                results_path.write_text(json.dumps(results, indent=2))
                # the page is written once, at the end: the default one is docs/matrix.md, in
                # the project whose files every cell checks it left alone (`--render-only`
                # writes it from the results an interrupted run kept)

        if args.jobs == 1:  # in this thread: a command run in the process may set signals
            list(map(one, chosen))
        else:
            with ThreadPoolExecutor(args.jobs) as pool:
                list(pool.map(one, chosen))
    Path(args.out).write_text(render(results, all_rows))
    bad = [(r, c) for r, got in results.items() for c, v in got.items() if v["status"] == "FAILED"]
    print(f"{len(bad)} failed cells: {bad}" if bad else "no failed cell")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
