"""Images, one class each: digits (offline default), MNIST, Fashion-MNIST, CIFAR-10 and a
user's image folders; a small CNN and ResNet-18."""

from litlab.domains import Domain, Template

DOMAIN = Domain(
    datamodules=(
        "data.DigitsDataModule",
        "data.ImageFolderDataModule",
        "downloads.MNISTDataModule",
        "downloads.FashionMNISTDataModule",
        "downloads.CIFAR10DataModule",
    ),
    modules=("module.ImageClassifier",),
    nets=("nets.SmallCNN", "nets.resnet18"),
    template=Template(
        "data.DigitsDataModule", "nets.SmallCNN", "digits", "cnn", "test/acc", 0.8, 3
    ),
)
