"""export_report.md (for people) and export_report.json (for scripts)."""

import json
from pathlib import Path


def report_markdown(r: dict) -> str:
    lines = [
        f"# Export report: {Path(r['checkpoint']).name}",
        "",
        (
            f"kind `{r['kind']}`; checkpoint `{r['checkpoint']}` "
            f"(sha256 `{r['metadata']['checkpoint_sha256'][:16]}...`); "
            f"litlab {r['metadata']['litlab_version']}, torch {r['metadata']['torch_version']}"
        ),
        "",
        f"## Formats (checkpoint {r['metric']}: {r['checkpoint_metric']:.4f})",
        "",
        (
            f"| format | file | size (bytes) | {r['metric']} | max abs diff | max rel diff "
            "| check | status |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for fmt, row in r["formats"].items():
        if "metric" not in row:
            lines.append(f"| {fmt} | {row['file']} | | | | | | FAILED: {row.get('error')} |")
            continue
        status = "ok" if row["ok"] else "FAILED"
        if row.get("written") is False:
            status = f"not written ({row['drop']:.4f} worse)"
        lines.append(
            f"| {fmt} | {'(none)' if row.get('written') is False else row['file']} | {row['size_bytes']:,} | {row['metric']:.4f} | "
            f"{row['max_abs_diff']:.2e} | {row['max_rel_diff']:.2e} | {row['check']} | "
            f"{status} |"
        )
    lines += [
        "",
        f"## Latency (ms, {r['threads']} thread(s); batch = {r['batch_unit']})",
        "",
        "| runtime | batch | p50 | p99 | runs |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {x['format']} | {x['batch']} | {x['p50_ms']:.3f} | {x['p99_ms']:.3f} | {x['runs']} |"
        for x in r["latency"]
    ]
    lines += ["", "Timings on a shared machine are noisy; compare rows of one report only.", ""]
    return "\n".join(lines)


def write_export_report(result: dict, out: Path) -> None:
    (out / "export_report.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "export_report.md").write_text(report_markdown(result))
