"""Per-sample predictions (what `predict_step` returns) gathered into one CSV."""

from pathlib import Path


def write_csv(batches: list, path: Path) -> int:
    """Concatenate predict_step's dicts of per-sample tensors (or lists of strings) and write
    them; returns rows."""
    import pandas as pd
    import torch

    batches = [b for b in batches if b]
    if not batches:
        return 0

    def column(values: list):  # tensors, or lists of names (e.g. a volume's case id)
        if isinstance(values[0], torch.Tensor):
            return torch.cat([v.detach().cpu().reshape(-1) for v in values]).numpy()
        return [item for v in values for item in v]

    columns = {k: column([b[k] for b in batches]) for k in batches[0]}
    frame = pd.DataFrame(columns)
    frame.insert(0, "index", range(len(frame)))
    tmp = path.with_suffix(".csv.tmp")
    frame.to_csv(tmp, index=False, float_format="%.6g")
    tmp.replace(path)  # never a half-written predictions.csv
    return len(frame)
