"""Rows of a CSV table: numeric feature columns, the target value in the last column. Without a
path, scikit-learn's diabetes table (442 patients, 10 features, disease progression after a
year; shipped inside scikit-learn: offline)."""

import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from litlab.bounds import Fraction, NonNegInt, PosInt, Seed
from litlab.data import folds
from litlab.data.base import SplitDataModule
from litlab.domains.table import values
from litlab.errors import UserError

#: target quantiles that stratify the splits and the k-fold folds (each split spans the range)
STRATA = 5


class TableDataModule(folds.FoldSettings, SplitDataModule):
    kind = "regression"
    data_name, fold_pool = "the table", "rows"
    #: what an exported file takes (its metadata says so)
    normalization = "none: raw values in the table's units (the net standardizes them)"

    def __init__(
        self,
        path: str | None = None,
        batch_size: PosInt = 64,
        val_fraction: Fraction = 0.1,
        test_fraction: Fraction = 0.2,
        num_folds: folds.NumFolds = None,
        fold: NonNegInt = 0,
        seed: Seed = 42,
        **kwargs,
    ):
        super().__init__(batch_size=batch_size, **kwargs)  # the other loader settings
        x, y, self.feature_names, self.target_names = read_table(path)
        self.y = y  # float64 until checked: the strata of the split read it
        self.split = self._split()
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
            return folds.settings_split(strata, h, self.data_name, self.fold_pool)
        from litlab.data.splits import stratified_split

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


def read_table(path) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """(features, target, feature names, [target name]) in float64 (values.py checks them
    in the net's float32); one line for a table that is not numbers with a header row."""
    if path is None:
        from sklearn.datasets import load_diabetes

        data = load_diabetes(scaled=False)
        names = [*data.feature_names, "progression"]
        table = np.column_stack([data.data, data.target])
    else:
        with open(path) as f:
            names = [n.strip() for n in f.readline().split(",")]
        if names != [""] and all(_is_number(n) for n in names):
            raise UserError(
                f"data.path={path}: its first row is numbers; the first row names the columns "
                "(a header row), the target's last"
            )
        try:
            with warnings.catch_warnings():  # an empty table: the one line below says it
                warnings.simplefilter("ignore", UserWarning)
                table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
