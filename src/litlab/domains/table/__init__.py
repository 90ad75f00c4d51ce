"""Tables: a CSV whose last column is the target (scikit-learn's diabetes table by
default), regression by an MLP that keeps the units of its features and target."""

from litlab.domains import Domain, Template

DOMAIN = Domain(
    datamodules=("data.TableDataModule",),
    modules=("module.Regressor",),
    nets=("nets.TableMLP",),
    template=Template(
        "data.TableDataModule", "nets.TableMLP", "table", "regressor", "test/r2", 0.3, 30
    ),
)
