"""compress_report.json (all numbers) and compress_report.md (the table a README can show)."""

import json
from pathlib import Path

NOTE = (
    "Unstructured pruning only zeroes weights: tensors keep their shapes, so the checkpoint, "
    "the ONNX file and dense kernels stay as big and as slow (compare `nonzero_params` with "
    "`params`); structured pruning removes channels, which shrinks both."
)

COLUMNS = [
    ("stage", "stage"),
    ("params", "params"),
    ("nonzero_params", "non-zero"),
    ("checkpoint_mb", "ckpt MB"),
    ("onnx_mb", "ONNX MB"),
]


def _cell(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4f}" if value < 1 else f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown_table(rows: list[dict], metric: str) -> str:
    """A markdown table: size, metric (and its share of the original's), latencies."""
    lat = sorted(
        {k for r in rows for k in r if k.startswith("latency_ms_")},
        key=lambda k: (not k.startswith("latency_ms_eager"), int(k.rsplit("_b", 1)[1])),
    )
    head = (
        [h for _, h in COLUMNS]
        + [metric, "vs original"]
        + [k.removeprefix("latency_ms_").replace("_b", " b") + " ms" for k in lat]
    )
    ref = rows[0].get(metric)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        share = r.get(metric) / ref if ref and r.get(metric) is not None else None
        cells = (
            [_cell(r.get(k)) for k, _ in COLUMNS]
            + [_cell(r.get(metric)), f"{share:.1%}" if share is not None else "n/a"]
            + [_cell(r.get(k)) for k in lat]
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_compress_report(rows: list[dict], metric: str, out: Path, context: dict) -> Path:
    """Write both files (after every step, so an interrupted chain keeps what it measured)."""
    (out / "compress_report.json").write_text(
        json.dumps({"metric": metric, "stages": rows, **context}, indent=2)
    )
    md = [
        f"# Compression report: {context.get('source', '')}",
        "",
        markdown_table(rows, metric),
        "",
        f"Latency: median ms per call on {context.get('threads', '?')} CPU thread(s); "
        "`onnx` = ONNX Runtime." + (" " + NOTE if context.get("unstructured") else ""),
        "",
        *[f"**{r['stage']}**: {r['verdict']}\n" for r in rows if r.get("verdict")],
    ]
    (out / "compress_report.md").write_text("\n".join(md))
    return out / "compress_report.md"
