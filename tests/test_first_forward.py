"""A net that cannot run on the data is one line naming `model.net`, its target and the input
shape (`runs.run_end.watched`); a net that runs is watched for its first forward only."""

import pytest
import torch

from litlab.errors import UserError
from litlab.runs.run_end import watched


def test_a_net_that_cannot_run_is_one_line_with_the_input_shape():
    net = torch.nn.Conv2d(3, 4, kernel_size=3)
    with pytest.raises(UserError) as err, watched(net, "my.Net"):
        net(torch.zeros(2, 1, 8, 8))  # one channel into a three-channel conv
    message = str(err.value)
    assert message.startswith("model.net (my.Net) cannot run on the data: input of shape")
    assert "[2, 1, 8, 8]" in message and "\n" not in message


def test_errors_outside_the_net_pass_through_and_the_watch_ends_after_one_forward():
    net = torch.nn.Linear(4, 2)
    with pytest.raises(KeyError), watched(net, "my.Net"):
        net(torch.zeros(1, 4))
        raise KeyError("the loop's own error")  # not the net's: not rewritten
    with watched(net, "my.Net"):
        net(torch.zeros(1, 4))
        assert not net._forward_hooks and not net._forward_pre_hooks  # no cost per step


def test_data_that_cannot_be_set_up_is_one_line_naming_data():
    class Folder:
        def setup(self, stage=None):
            raise FileNotFoundError("Found no valid file for the classes a, b.\nSupported: .png")

    dm, net = Folder(), torch.nn.Linear(2, 2)
    with pytest.raises(UserError) as err, watched(net, "n", datamodule=dm, data_target="my.Data"):
        dm.setup("fit")  # Lightning calls it inside fit
    assert str(err.value) == (
        "data (my.Data) cannot be set up: Found no valid file for the classes a, b."
    )
