"""1D signals, one class each: an .npz of (N, C, T) sequences and their labels (a demo of noisy
sines by default), a small 1D CNN; the signal classification kind of docs/new_task.md."""

from litlab.domains import Domain, Template

DOMAIN = Domain(
    datamodules=("data.SignalDataModule",),
    modules=("module.SignalClassifier",),
    nets=("module.SignalCNN",),
    template=Template(
        data="data.SignalDataModule",
        net="module.SignalCNN",
        data_config="signal",
        model_config="cnn1d",
        metric="test/acc",
        bar=0.8,
        epochs=10,
    ),
)
