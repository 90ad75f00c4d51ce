"""1D signals in, one class per signal out (sensor channels over time: a batch is (N, C, T)
float sequences). The kind whose inputs are new, all in this file: what they are
(`SequenceInputs`: raw JSON sequences of any length, standardized per channel and fitted to
the model's length as the datamodule did; what an exported file's metadata holds of them),
the samples figure (`SignalGrid`) and the kind itself (`SignalClassification`)."""

from litlab.tasks import checks
from litlab.tasks.figures import SamplesFigure
from litlab.tasks.kind import Classes, Kind, register_kind
from litlab.tasks.tensors import MeasuredInputs


class SequenceInputs(MeasuredInputs):
    """(N, C, T) float sequences. An export takes them standardized with the training
    channels' mean and std (`inputs.x.normalization`); the service takes raw values, several
    signals a request, each of the model's channels and any length: a longer signal is
    centre-cropped to the model's length T, a shorter one zero-padded at both ends (0: the
    channel's mean). The out-of-distribution score also measures the sequences."""

    json_words = "inputs: signals of channels x values"

    def preprocessing(self, dm) -> dict:
        return {"normalization": {"mean": list(dm.mean), "std": list(dm.std)}}

    def check_inputs(self, inputs: dict) -> int:
        channels = checks.sample_shape(inputs, rank=3)[1]  # ['batch', C, T]
        checks.normalization(inputs["x"].get("normalization"), channels)
        return channels

    def decode(self, data: dict, layout: dict, max_items: int):
        """{"inputs": [signal, ...]}, each signal C lists of one length, in raw units."""
        import numpy as np

        if "inputs" not in data:
            message = "The JSON body needs an 'inputs' key: a list of signals (channels x values)."
            raise checks.BadRequest(message, 422)
        items = data["inputs"]
        checks.count(len(items) if isinstance(items, list) else 1, max_items, "signals")
        x = checks.array(items, "inputs", np.float32, 3)
        channels, length = (int(s) for s in layout["x"]["shape"][1:])
        if x.shape[1] != channels or x.shape[2] < 1:
            raise checks.BadRequest(
                f"Each signal must be {channels} channel(s) of one or more values, not "
                f"{x.shape[1]} of {x.shape[2]}.",
                422,
            )
        norm = layout["x"]["normalization"]
        mean, std = (np.asarray(norm[k], np.float32)[:, None] for k in ("mean", "std"))
        return fit_length((x - mean) / std, length)

    async def warm_up(self, predictor) -> None:
        """A signal of the model's length, and one twice as long (the crop path)."""
        channels, length = (int(s) for s in predictor.runner.layout["x"]["shape"][1:])
        for size in (length, 2 * length):
            await self.json(predictor, {"inputs": [[[0.0] * size] * channels]})


def fit_length(x, length: int):
    """(N, C, T') sequences centre-cropped or zero-padded to (N, C, length)."""
    import numpy as np

    extra = x.shape[2] - length
    if extra >= 0:
        return np.ascontiguousarray(x[:, :, extra // 2 : extra // 2 + length])
    return np.pad(x, ((0, 0), (0, 0), (-extra // 2, -extra - (-extra // 2))))


class SignalGrid(SamplesFigure):
    """`callbacks=inspect`'s samples figure: the first test signals (each channel a line),
    titled with the true and predicted class (green when right)."""

    def draw(self, trainer):
        import torch

        from litlab.tasks.figures import figure

        x, y, pred = (torch.cat(t) for t in zip(*self.held))
        cols = 4
        fig = figure(3 * cols, 1.6 * -(-len(x) // cols))
        for i in range(len(x)):
            ax = fig.add_subplot(-(-len(x) // cols), cols, i + 1)
            ax.plot(x[i].T.numpy(), linewidth=0.8)
            right = int(y[i]) == int(pred[i])
            title = f"true {int(y[i])} / pred {int(pred[i])}"
            ax.set_title(title, fontsize=7, color="green" if right else "red")
            ax.axis("off")
        return fig


@register_kind
class SignalClassification(SequenceInputs, Classes, Kind):
    name = "signal_classification"
    metrics = ("acc", "f1")
    inspect = ("samples", "confusion", "embeddings", "histograms", "model_graph")
    samples_figure = SignalGrid
    # int8 of a small 1D CNN: every op, judged by the test accuracy, kept within 2% of it
    quantize_max_drop = 0.02
    # compress: fine-tuning and student epochs (an epoch is ~8 batches of the demo signals)
    compress_epochs = 10
    # a client holds ~50 signals (one batch): 3 passes a round
    federated_local_epochs = 3
