"""Numbers in, one value per sample out (a table's target column): the kind whose output is not
a class. Everything a layer needs to know of it is in this file: what its outputs are (`Values`:
export metadata, metric input, served answer), its samples figure (`Residuals`: predicted
against true values on the test split) and the kind itself (`Regression`: its declarations, on
the inputs every kind of fixed-size samples shares, `TensorInputs`)."""

from litlab.tasks.figures import SamplesFigure
from litlab.tasks.kind import Kind, register_kind
from litlab.tasks.tensors import TensorInputs


class Values:
    """One number per output column, in the target's own units (the net undoes the targets'
    standardization itself): served as `predictions`, one number per row (a list per row for
    several targets); no class probabilities, so no out-of-distribution score."""

    names_key = "targets"

    @staticmethod
    def names(model, datamodule) -> list[str]:
        return [str(n) for n in datamodule.target_names]

    @staticmethod
    def metric_input(outputs):
        return outputs[:, 0] if outputs.shape[1] == 1 else outputs

    @staticmethod
    def strata(train_values, heldout_values, count: int = 5):
        """Federated partitions deal rows out by quintile of the training targets (a client
        of a Dirichlet partition holds mostly low or mostly high values)."""
        import numpy as np

        edges = np.quantile(train_values, np.linspace(0, 1, count + 1)[1:-1])
        return np.digitize(train_values, edges), np.digitize(heldout_values, edges)

    @staticmethod
    def output_rank(layout: dict) -> tuple[int, str]:
        return 2, "values (items x targets)"

    @staticmethod
    def prepare(outputs):
        import numpy as np

        return outputs.astype(np.float64)

    @staticmethod
    def answer(names: list[str], values) -> dict:
        import numpy as np

        rows = np.round(values, 6)
        return {
            "predictions": (rows[:, 0] if rows.shape[1] == 1 else rows).tolist(),
            "targets": names,
        }


class Residuals(SamplesFigure):
    """`callbacks=inspect`'s samples figure: predicted against true values of the whole test
    split (the diagonal is a perfect model), and the residuals against the prediction."""

    def collect(self, module, batch) -> None:
        x, y = batch
        self.held.append((module(x)[:, 0].detach().float().cpu(), y.float().cpu()))

    def draw(self, trainer):
        import torch
        from matplotlib.figure import Figure  # no pyplot state, no GUI backend

        pred, true = (torch.cat(t).numpy() for t in zip(*self.held))
        name = trainer.datamodule.target_names[0]
        fig = Figure(figsize=(8, 3.6))
        left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        fig.subplots_adjust(wspace=0.35)
        left.scatter(true, pred, s=8, alpha=0.6)
        ends = [min(true.min(), pred.min()), max(true.max(), pred.max())]
        left.plot(ends, ends, color="gray", linewidth=1)
        left.set(xlabel=f"true {name}", ylabel=f"predicted {name}", title="test split")
        right.scatter(pred, true - pred, s=8, alpha=0.6)
        right.axhline(0, color="gray", linewidth=1)
        right.set(xlabel=f"predicted {name}", ylabel="residual (true - predicted)")
        return fig


@register_kind
class Regression(TensorInputs, Values, Kind):
    """/predict takes JSON rows ({"inputs": [[...], ...]}), several per request, in the
    table's own units; an export names their columns."""

    name = "regression"
    # r2 is the monitor (higher is better); mae and rmse in the target's own units
    metrics = ("mae", "rmse", "r2")
    inspect = ("samples", "histograms")
    samples_figure = Residuals
    # every compression step: structured pruning narrows the hidden layers (the output layer
    # is kept), distillation teaches the student the teacher's values (the module's
    # `soft_loss`); each judged by the test r2, quantize by a share of it
    quantize_max_drop = 0.02
    # compress: fine-tuning and student epochs (an epoch is ~10 small batches)
    compress_epochs = 100
    # int8: the dense layers only. Raw feature columns of different ranges share one int8
    # scale at the input (a 1-or-2 column next to a 100-300 one rounds away): the
    # standardization around the layers stays fp32 (diabetes: test r2 0.59 -> 0.56 with every
    # op quantized)
    int8_op_types = ("Gemm", "MatMul")
    # federated clients hold rows, dealt out by the quintile of their target (`Values.strata`):
    # ~30 rows (one batch) each, 10 passes a round (diabetes, 20 rounds, 10 clients: test r2
    # 0.57 against 0.34 with one)
    federated_local_epochs = 10

    def preprocessing(self, dm) -> dict:
        return {**super().preprocessing(dm), "columns": [str(n) for n in dm.feature_names]}
