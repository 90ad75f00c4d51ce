"""Rows of a CSV table: numeric feature columns, the target value in the last column. Without a
path, scikit-learn's diabetes table (442 patients, 10 features, disease progression after a
year; shipped inside scikit-learn: offline). Each row is named by its number (0: the first
row after the header) or by the column `id_column` names, which is no feature."""

import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from litlab.bounds import Fraction, NonNegInt, PosInt, Seed
from litlab.data import FoldSettings, NumFolds, SplitDataModule, settings_split
from litlab.domains.table import values
from litlab.errors import UserError
from litlab.tasks.regression import Regression

#: target quantiles that stratify the splits and the k-fold folds (each split spans the range)
STRATA = 5


class TableDataModule(FoldSettings, SplitDataModule):
    kind = Regression.name
    data_name, fold_pool = "the table", "rows"
    source_column = "row"
    #: what an exported file takes (its metadata says so)
    normalization = "none: raw values in the table's units (the net standardizes them)"

    def __init__(
        self,
        path: str | None = None,
        id_column: str | None = None,
        batch_size: PosInt = 64,
        val_fraction: Fraction = 0.1,
        test_fraction: Fraction = 0.2,
        num_folds: NumFolds = None,
        fold: NonNegInt = 0,
        seed: Seed = 42,
        **kwargs,
    ):
        super().__init__(batch_size=batch_size, **kwargs)  # the other loader settings
        x, y, self.feature_names, self.target_names = read_table(path, id_column)
        self.y = y  # float64 until checked: the strata of the split read it
        self.split = self._split()
        ids = read_ids(path, id_column) if id_column else range(len(y))
        self.split_sources = {k: [ids[i] for i in v] for k, v in self.split.items()}
        if id_column:  # predictions.csv's own columns keep their names
            self.source_column = (
                id_column if id_column not in OWN_COLUMNS else f"source_{id_column}"
            )
        train = self.split["train"]
        # the net standardizes features and targets with the training rows' statistics, in
        # float32: each value is checked so, by column, before it is cast
        self.feature_mean, self.feature_std = values.moments(x[train])
        self.target_mean, self.target_std = values.moments(y[train, None])
        where = f"data.path={path}"
        values.check_columns(x, self.feature_mean, self.feature_std, self.feature_names, where)
        values.check_columns(
            y[:, None], self.target_mean, self.target_std, self.target_names, where
        )
        values.check_target_scale(y, self.target_names[0], where)
        values.warn_constant_target(y, self.split, self.target_names[0], where)
        self.x, self.y = x.astype(np.float32), y.astype(np.float32)

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> None:
        path = settings.get("path")
        if path is not None and not Path(str(path)).is_file():
            raise UserError(f"{key}.path={path} is not a file (a CSV table, or null: diabetes)")
        if settings.get("id_column") is not None:
            read_ids(path, str(settings["id_column"]), key)
        cls.check_folds(settings, key, None)

    @property
    def dims(self) -> dict:
        return {
            "in_features": self.x.shape[1],
            "feature_mean": self.feature_mean,
            "feature_std": self.feature_std,
            "target_mean": self.target_mean,
            "target_std": self.target_std,
        }

    def _split(self) -> dict[str, np.ndarray]:
        """Rows by split, stratified by target quantile (k-fold: fold `fold` tests)."""
        h = self.hparams
        strata = np.digitize(self.y, np.quantile(self.y, np.linspace(0, 1, STRATA + 1)[1:-1]))
        if h.num_folds is not None:
            return settings_split(strata, h, self.data_name, self.fold_pool)
        from litlab.data import stratified_split

        rest, test = stratified_split(strata, h.test_fraction, h.seed, "data.test_fraction")
        fit, val = stratified_split(strata[rest], h.val_fraction, h.seed, "data.val_fraction")
        return {"train": rest[fit], "val": rest[val], "test": test}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:  # once: a federated client's narrowed sets stay so
            return
        x, y = torch.from_numpy(self.x), torch.from_numpy(self.y)
        self.train_set, self.val_set, self.test_set = (
            TensorDataset(x[self.split[s]], y[self.split[s]]) for s in ("train", "val", "test")
        )


#: the columns predictions.csv of a table has anyway: an id column of one of these names is
#: written as source_<name>
OWN_COLUMNS = ("index", "target", "pred", "residual")


def read_table(
    path, id_column: str | None = None
) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """(features, target, feature names, [target name]) in float64 (values.py checks them
    in the net's float32), the id column left out; one line for a table that is not numbers
    with a header row."""
    if path is None:
        from sklearn.datasets import load_diabetes

        data = load_diabetes(scaled=False)
        names = [*data.feature_names, "progression"]
        table = np.column_stack([data.data, data.target])
    else:
        names = _header(path)
        if names != [""] and all(_is_number(n) for n in names):
            raise UserError(
                f"data.path={path}: its first row is numbers; the first row names the columns "
                "(a header row), the target's last"
            )
        keep = [i for i, n in enumerate(names) if n != id_column] if id_column else None
        names = [n for n in names if n != id_column] if id_column else names
        try:
            with warnings.catch_warnings():  # an empty table: the one line below says it
                warnings.simplefilter("ignore", UserWarning)
                table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, usecols=keep)
        except ValueError as err:
            raise UserError(f"data.path={path}: not a table of numbers ({err})") from None
    if table.shape[1] < 2 or len(table) < 10 or not np.isfinite(table).all():
        raise UserError(
            f"data.path={path}: {table.shape[0]} rows of {table.shape[1]} columns; expected at "
            "least 10 rows of finite numbers: features, then the target in the last column"
        )
    if len(names) != table.shape[1]:
        names = [f"x{i}" for i in range(table.shape[1] - 1)] + ["target"]
    return table[:, :-1], table[:, -1], names[:-1], names[-1:]


def read_ids(path, id_column: str, key: str = "data") -> list[str]:
    """The values of the column `id_column` names, one per row: each row's id in
    predictions.csv and data_split.json. One line unless it is a column of the header, not the
    target's, holding no id twice."""
    if path is None:
        raise UserError(
            f"{key}.id_column={id_column} needs a table ({key}.path=your.csv); the diabetes "
            "table has no id column: its rows are named by number"
        )
    names = _header(path)
    if id_column not in names[:-1]:
        valid = ", ".join(names[:-1])
        raise UserError(
            f"{key}.id_column={id_column} is not a column of {path}; valid: a column of its "
            f"header row other than the target's (the last): {valid}"
        )
    try:  # the rows np.loadtxt reads the features from, in their order
        ids = np.loadtxt(path, delimiter=",", skiprows=1, usecols=[names.index(id_column)],
                         dtype=str, ndmin=1).tolist()  # fmt: skip
    except ValueError as err:
        raise UserError(f"{key}.path={path}: not a table ({err})") from None
    ids = [i.strip() for i in ids]
    seen: dict[str, int] = {}
    for row, value in enumerate(ids):
        if value in seen:
            raise UserError(
                f"{key}.id_column={id_column}: the id {value!r} names rows {seen[value]} and "
                f"{row} of {path}; valid: a column that names each row once"
            )
        seen[value] = row
    return ids


def _header(path) -> list[str]:
    """The names of the header row; one line for a file that is not UTF-8 text."""
    try:
        with open(path, encoding="utf-8") as f:
            return [n.strip() for n in f.readline(1 << 24).split(",")]
    except UnicodeDecodeError as err:
        raise UserError(
            f"data.path={path}: it is not UTF-8 text ({err.reason} at byte "
            f"{err.start}); save the table as a UTF-8 CSV with a header row"
        ) from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
