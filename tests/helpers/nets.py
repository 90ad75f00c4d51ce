"""Nets that tests build when the shipped ones lack a shape the test needs."""

import torch


class TinyResNet(torch.nn.Module):
    """Two residual blocks: the channels of a residual addition must be pruned together."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 32):
        super().__init__()

        def conv(a, b):
            return torch.nn.Conv2d(a, b, 3, padding=1, bias=False)

        self.stem, self.bn = conv(in_channels, width), torch.nn.BatchNorm2d(width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                conv(width, width),
                torch.nn.BatchNorm2d(width),
                torch.nn.ReLU(),
                conv(width, width),
                torch.nn.BatchNorm2d(width),
            )
            for _ in range(2)
        )
        self.fc = torch.nn.Linear(width, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        for block in self.blocks:
            x = torch.relu(x + block(x))
        return self.fc(x.mean((2, 3)))
