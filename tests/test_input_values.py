"""Values checked where they will be used (issue 46): a table's values in the net's float32 and
after its standardization, a mask's values as class numbers in a lossless file, image and
volume files that are regular files, `data.image_size` against the net's strides and the
machine's memory; all-background masks and a constant target warned about. Each case is a tiny
file in tmp_path read by the datamodule or the config check in process (no training).
Refusals are one line naming the file, column or key and what is valid."""

import logging

import numpy as np
import pytest

from litlab.errors import UserError


def one_line(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as err:
        call(*args, **kwargs)
    message = str(err.value)
    assert message and "\n" not in message, message
    return message


# ---------------------------------------------------------------------------------- tables
ROWS = 60


def table(path, columns: dict, target=None):
    """A CSV of `columns` (name: values, written exactly as given) and a target `y` that a
    linear model fits (or `target`)."""
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(ROWS, 2))
    data = {"a": noise[:, 0], "b": noise[:, 1], **columns}
    y = noise @ [1.0, 2.0] if target is None else target
    with open(path, "w") as f:
        f.write(",".join([*data, "y"]) + "\n")
        f.writelines(",".join(_cell(v[i]) for v in (*data.values(), y)) + "\n" for i in range(ROWS))
    return str(path)


def _cell(value) -> str:
    """An int as its digits (2**40 + 1 exactly), a float as Python reads it back."""
    return str(value) if isinstance(value, int) else repr(float(value))


def standardized(dm):
    """The training rows' features as the net sees them (its first op), float32."""
    from litlab.domains.table.nets.mlp import TableMLP

    net = TableMLP(**dm.dims)
    dm.setup()
    x, y = dm.train_set.tensors
    return ((x - net.feature_mean) / net.feature_std).numpy(), net, x, y


SCALED = np.random.default_rng(1).normal(size=ROWS)
TABLES = {  # name: (extra columns, target, words of the refusal)
    "a cell of 1e39": (
        {"c": [*[1.0] * 3, 1e39, *[2.0] * (ROWS - 4)]},
        None,
        "column 'c', row 4: 1e+39 is beyond float32, the net's dtype (magnitudes up to 3.4e+38)",
    ),
    "a target at 1e30": (
        {},
        SCALED * 1e30,
        "the target 'y', row 1: 3.45584e+29 is too large for the metrics in float32",
    ),
    "int64 ids beyond float32's precision": (
        {"id": [2**40 + i for i in range(ROWS)]},
        None,
        (
            "column 'id': its values (near 1.09951e+12, spread 17.9) differ by less than float32, "
            "the net's dtype, resolves at that magnitude (row 60's 1099511627835 reads as "
            "1099511627776); subtract an offset from the column (e.g. its minimum, 1099511627776)"
        ),
    ),
    "values that overflow once centred": (
        {"c": [-3e38 if i == 7 else 3e38 for i in range(ROWS)]},
        None,
        "column 'c', row 8: -3e+38 overflows float32 (the net's dtype) once standardized",
    ),
    "a target near 2**40 that varies by units": (
        {},
        np.arange(ROWS) + 2.0**40,
        "column 'y': its values (near 1.09951e+12, spread 17.2) differ by less than float32",
    ),
}


@pytest.mark.parametrize("name", list(TABLES))
def test_table_values_lost_in_float32_are_refused_naming_column_and_row(name, tmp_path):
    from litlab.domains.table.data import TableDataModule

    columns, target, words = TABLES[name]
    path = table(tmp_path / "t.csv", columns, target)
    message = one_line(TableDataModule, path=path)
    assert message.startswith(f"data.path={path}: ") and words in message, message


def test_table_columns_at_any_scale_reach_the_net_standardized(tmp_path):
    """A column at 1e30 (its squares overflow float32), one at 1e-30 and a constant one: the
    first two reach the net with unit spread (before: 0, silently), the constant one as 0."""
    import torch

    from litlab.domains.table.data import TableDataModule

    columns = {"huge": SCALED * 1e30, "tiny": SCALED * 1e-30, "same": [0.1] * ROWS}
    dm = TableDataModule(path=table(tmp_path / "t.csv", columns, target=SCALED * 1e15))
    z, net, x, y = standardized(dm)
    assert np.isfinite(z).all()
    assert z[:, 2:4].std(0) == pytest.approx([1.0, 1.0], abs=0.05)
    assert (z[:, 4] == 0).all()  # equal values: nothing, not noise divided by 1e-8
    from litlab.domains.table.module import Regressor

    module = Regressor(net, optimizer=None)
    with torch.no_grad():
        loss = module.task_loss(net(x), y)  # training's loss at step 0, and its metrics
        metrics = module.make_metrics()
        metrics.update(net(x)[:, 0], y)
    assert np.isfinite(float(loss)) and all(
        np.isfinite(float(v)) for v in metrics.compute().values()
    )


def test_a_constant_target_is_warned_about_once(tmp_path, caplog):
    from litlab.domains.table.data import TableDataModule

    with caplog.at_level(logging.WARNING):
        TableDataModule(path=table(tmp_path / "t.csv", {}, target=np.full(ROWS, 3.0)))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert lines == [
        (
            f"data.path={tmp_path / 't.csv'}: the target 'y' is 3 in every row: there is nothing "
            "to learn, and r2 is undefined (printed as 0)"
        )
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        TableDataModule(path=table(tmp_path / "u.csv", {}))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
