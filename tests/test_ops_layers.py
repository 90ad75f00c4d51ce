"""The layers over litlab::tiled_matmul: TiledLinear is an nn.Linear (same parameters and
outputs), works under mixed precision, and `linear_impl=tiled` on the vision, 3D and graph nets
starts from the torch variant's weights; the net without a linear refuses the option in one
line."""

import pytest
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
    from litlab.domains.medical3d.nets import resnet3d
    from litlab.domains.vision.nets import SmallCNN, resnet18

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
    """The 3D U-Net (convolutions only) has no linear_impl: one line, exit 2."""
    for model in ("unet3d",):
        proc = cli("train.py", f"model={model}", "model.net.linear_impl=tiled", check=False)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        want = "error: unknown config key 'model.net.linear_impl' (to add a new key use +"
        assert lines == [want + "model.net.linear_impl=tiled)"], lines


@pytest.mark.parametrize(
    ("conv", "task"),
    [
        ("gcn", "node_classification"),
        ("gat", "graph_classification"),
        ("sage", "node_classification"),
        ("gin", "graph_classification"),
        ("mlp", "node_classification"),
    ],
)
def test_gnn_with_linear_impl_tiled_runs_every_dense_product_through_the_op(conv, task):
    """Graph nets: the convs' weights (PyG's Linear), GIN's MLPs, the MLP baseline and the
    classifier become TiledLinears with the same parameters; outputs equal the torch variant."""
    from torch_geometric.nn.dense.linear import Linear as PygLinear

    from litlab.domains.graph.nets import GNN

    x, edges, batch = torch.randn(30, 12), torch.randint(0, 30, (2, 80)), torch.arange(30) // 10
    kw = {"conv": conv, "kind": task, "hidden_channels": 16, "heads": 2 if conv == "gat" else 1}
    torch.manual_seed(0)
    ref = GNN(12, 3, **kw).eval()
    torch.manual_seed(0)
    tiled = GNN(12, 3, linear_impl="tiled", **kw).eval()
    assert not [m for m in tiled.modules() if type(m) in (torch.nn.Linear, PygLinear)]
    assert sum(isinstance(m, TiledLinear) for m in tiled.modules()) >= 2
    for (k1, v1), (k2, v2) in zip(ref.state_dict().items(), tiled.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), k1
    args = (x, edges) if task == "node_classification" else (x, edges, batch)
    with torch.no_grad():
        close(tiled(*args), ref(*args))
