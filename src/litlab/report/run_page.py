"""The sections of a run's report: learning curves, final metrics, the inspect pictures it
has, its config and provenance. Each says what is missing instead of failing."""

from pathlib import Path

from litlab.report import figures, files
from litlab.report.page import Page

# inspect/ pictures in the order shown, with what they are (docs/inspect.md); others follow
PICTURES = {
    "confusion_val.png": "confusion matrix, validation (rows: true class)",
    "confusion_test.png": "confusion matrix, test (rows: true class)",
    "gradcam.png": "Grad-CAM on test samples",
    "tsne.png": "t-SNE of the test samples' features",
    "samples.png": "test samples: true/predicted (3D: masks over the middle slice)",
}
INSPECT_HINT = (
    "python src/train.py callbacks=inspect draws confusion matrices, Grad-CAM, t-SNE and "
    "sample overlays"
)


def add_run(page: Page, run: Path) -> None:
    curves(page, run)
    final_metrics(page, run)
    pictures(page, run)
    config(page, run)
    provenance(page, run)


def curves(page: Page, run: Path) -> None:
    found = files.walk(run / "csv", "metrics.csv") if (run / "csv").is_dir() else []
    rows = files.read_csv(run, found[0].relative_to(run)) if found else None
    if not rows:
        page.add(
            "Learning curves",
            page.missing(
                "No learning curves: csv/metrics.csv is absent or empty (the CSV logger, on by "
                "default, writes it once the first epoch ends)"
            ),
        )
        return
    plots = [page.figure(f) for f in figures.learning_curves(rows)]
    page.add("Learning curves", *(plots or [page.missing("csv/metrics.csv has no numbers")]))


def final_metrics(page: Page, run: Path) -> None:
    data, problem = files.read_json_under(run, "metrics.json")
    values = {str(k): files.number(v) for k, v in data.items()} if isinstance(data, dict) else {}
    rows = [{"metric": k, "value": v} for k, v in sorted(values.items()) if v is not None]
    if not rows:
        why = problem or "metrics.json holds no metrics"
        page.add(
            "Final metrics",
            page.missing(f"No final metrics: {why} (a run writes it when it has tested)"),
        )
        return
    page.add("Final metrics", page.table(rows, ["metric", "value"]))


def pictures(page: Page, run: Path) -> None:
    folder = run / "inspect"
    names = sorted(p.name for p in folder.glob("*.png")) if folder.is_dir() else []
    order = [n for n in PICTURES if n in names] + [n for n in names if n not in PICTURES]
    shown = [(n, data) for n in order if (data := files.png(run, Path("inspect") / n))]
    if not shown:
        page.add(
            "Inspect pictures",
            page.missing(f"No inspect pictures in this run (inspect/*.png): {INSPECT_HINT}"),
        )
        return
    parts = ['<div class="pictures">']
    parts += [page.picture(data, f"{PICTURES.get(n, n)} ({n})") for n, data in shown]
    parts.append("</div>")
    absent = [n for n in PICTURES if n not in names]
    if absent:
        parts.append(
            page.missing(
                f"Not in this run: {', '.join(absent)} (each is drawn only for the tasks it "
                "applies to; docs/inspect.md)"
            )
        )
    for split in ("val", "test"):
        rows = files.read_csv(run, f"inspect/per_class_{split}.csv")
        if rows:
            parts += [page.text(f"per class, {split}"), page.table(rows, list(rows[0]))]
    page.add("Inspect pictures", *parts)


def config(page: Page, run: Path) -> None:
    parts = []
    for name, what in (("overrides.yaml", "command-line overrides"), ("config.yaml", "config")):
        text = files.read_text(run, Path(".hydra") / name)
        parts += [page.text(what), page.pre(text)] if text is not None else []
    page.add("Config", *(parts or [page.missing(".hydra/config.yaml cannot be read")]))


def provenance(page: Page, run: Path) -> None:
    data, problem = files.read_json_under(run, "provenance.json")
    if not isinstance(data, dict):
        why = problem or "provenance.json is not a mapping"
        page.add(
            "Provenance",
            page.missing(f"No provenance: {why} (train.py writes it when training starts)"),
        )
        return
    parts = []
    for part in ("code", "packages"):
        value = data.get(part)
        if isinstance(value, dict):
            rows = [{"name": k, "value": v} for k, v in value.items()]
            parts += [page.text(part), page.table(rows, ["name", "value"])]
    data_files = data.get("data")
    if isinstance(data_files, dict):
        parts.append(page.text(f"data: SHA-256 of {len(data_files)} file(s) in provenance.json"))
    page.add("Provenance", *(parts or [page.missing("provenance.json holds no code or packages")]))
