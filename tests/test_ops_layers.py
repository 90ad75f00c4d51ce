"""The layers over litlab::tiled_matmul: TiledLinear is an nn.Linear (same parameters and
outputs), works under mixed precision, and `linear_impl=tiled` on the vision and 3D nets starts
from the torch variant's weights; nets without a linear refuse the option in one line."""

import torch

from litlab.ops import TiledLinear


def close(got, want, tol=1e-4):
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_tiled_linear_is_a_linear():
    """Same parameters and state_dict keys as nn.Linear, same outputs: checkpoints move
    between linear_impl=torch and tiled."""
    ref = torch.nn.Linear(8, 16)
    tiled = TiledLinear(8, 16)
    tiled.load_state_dict(ref.state_dict())
    x = torch.randn(3, 5, 8)
    close(tiled(x), ref(x))
    assert isinstance(tiled, torch.nn.Linear)


def test_mixed_precision_casts_to_bf16():
    """Under autocast (trainer.precision=bf16-mixed) a bf16 activation meets an fp32 weight:
    both are cast to bf16, as for aten.mm, and the gradient reaches the fp32 weight."""
    x = torch.randn(16, 32)
    layer = TiledLinear(32, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x.bfloat16())
        ref = torch.nn.functional.linear(x.bfloat16(), layer.weight, layer.bias)
    close(out.float(), ref.float(), tol=2e-2)
    out.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32 and layer.weight.grad.abs().sum() > 0


def test_nets_with_linear_impl_tiled_start_from_the_same_weights():
    """linear_impl=tiled on the nets of the vision and 3D domains: the classifier becomes a
    TiledLinear with the same parameters (names and, under one seed, values) and outputs."""
    from litlab.models.nets.cnn import SmallCNN
    from litlab.models.nets.resnet import resnet18
    from litlab.models.nets.resnet3d import resnet3d

    cases = [
        (lambda **kw: SmallCNN(1, 10, 8, **kw), torch.randn(3, 1, 8, 8), "head.3"),
        (lambda **kw: resnet18(1, 10, 8, **kw), torch.randn(3, 1, 8, 8), "fc"),
        (lambda **kw: resnet3d(1, 2, widen_factor=0.25, **kw), torch.randn(2, 1, 16, 16, 16), "fc"),
    ]
    for make, x, head in cases:
        torch.manual_seed(0)
        ref = make().eval()
        torch.manual_seed(0)
        tiled = make(linear_impl="tiled").eval()
        assert type(tiled.get_submodule(head)) is TiledLinear
        for (k1, v1), (k2, v2) in zip(ref.state_dict().items(), tiled.state_dict().items()):
            assert k1 == k2 and torch.equal(v1, v2), k1
        with torch.no_grad():
            close(tiled(x), ref(x))


def test_nets_without_a_linear_refuse_the_option_in_one_line(cli):
    """The graph net (PyG layers) and the 3D U-Net have no linear_impl: one line, exit 2."""
    for model in ("gnn", "unet3d"):
        proc = cli("train.py", f"model={model}", "model.net.linear_impl=tiled", check=False)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        want = "error: unknown config key 'model.net.linear_impl' (to add a new key use +"
        assert lines == [want + "model.net.linear_impl=tiled)"], lines
