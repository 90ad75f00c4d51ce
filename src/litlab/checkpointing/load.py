"""Loading checkpoints safely: `weights_only=True` always, and one clear line when a file is
missing, truncated, corrupt, not a litlab checkpoint, or holds entries of the wrong structure:
every command that reads a checkpoint reads it here, so each is refused alike.

A checkpoint's weights are data too: a file from elsewhere may hold a `state_dict` of the
wrong structure, tensors of the wrong shape, keys another net has, or NaN/inf weights that
would evaluate and export without a word. Each is one line, before anything is built from it
or written (`check_tensors` on every load, `check_tensors_fit` in `load_run`).

Where litlab's own classes moved. A checkpoint written before each domain became one folder
(`litlab.domains`), or before small modules joined the module of their concept,
names its classes by their old module paths (`litlab.data.vision.DigitsDataModule`,
`litlab.models.nets.cnn.SmallCNN`, `litlab.compression.resize.resized_net`); its stored config's
`_target_` and `base_target` names are renamed by this fixed table when the checkpoint is read,
before anything checks or builds them (litlab.checkpointing.trust still checks the new name).
Only whole module paths litlab shipped are renamed: a file can name nothing new through it."""

from pathlib import Path

from litlab.checkpointing.run_config import CONFIG_KEY
from litlab.checkpointing.trust import config_nodes, shown
from litlab.errors import UserError, one_line
from litlab.utils.files import check_regular


def load(path: str | Path, mmap: bool = False) -> dict:
    """The checkpoint dict (tensors on CPU); it must hold the run config that train.py stores.

    `mmap=True` reads the pickle and the zip directory; the tensors are paged in only as far
    as the finite-values check reads them."""
    import torch

    check_regular(path, f"ckpt_path={path}", "pass a .ckpt file")  # a pipe: never opened
    if not Path(path).is_file():
        raise UserError(f"ckpt_path={path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # zip errors, unpickling errors, EOF: all mean a bad file
        raise UserError(
            f"ckpt_path={path} cannot be loaded (truncated or corrupt?): {one_line(err)}"
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or CONFIG_KEY not in ckpt:
        raise UserError(
            f"ckpt_path={path} is not a checkpoint written by litlab's train.py "
            f"(no '{CONFIG_KEY}' entry)"
        )
    check_entries(ckpt, str(path))
    return ckpt


def check_entries(ckpt: dict, source: str) -> None:
    """The entries litlab reads from a checkpoint have the structure train.py writes."""
    from litlab.checkpointing import run_config

    if not isinstance(ckpt[CONFIG_KEY], dict):
        raise UserError(
            f"ckpt_path={shown(source, 200)}: its stored config ('{CONFIG_KEY}') is a "
            f"{type(ckpt[CONFIG_KEY]).__name__}, not a mapping of the run's settings"
        )
    renamed(ckpt[CONFIG_KEY])  # a checkpoint from before the domains' move: new names
    run_config.check_record(ckpt.get(run_config.KEY), source)
    check_tensors(ckpt["state_dict"], source)


# --------------------------------------------------------------- weights
SLICE = 1 << 20  # elements checked at a time: isfinite's mask stays ~1 MB per tensor
LEGACY = "_forward."  # older checkpoints' second copy of the net (litlab.models: dropped)


def _refusal(source: str, what: str) -> UserError:
    return UserError(f"ckpt_path={shown(str(source), 200)}: {what}")


def check_tensors(state_dict, source: str) -> None:
    """A mapping of parameter names to dense tensors, every floating one finite."""
    import torch

    if not isinstance(state_dict, dict):
        raise _refusal(
            source,
            f"its state_dict is a {type(state_dict).__name__}, not a mapping of parameter "
            "names to tensors (not a checkpoint written by litlab's train.py)",
        )
    for key, value in state_dict.items():
        if not isinstance(key, str):
            raise _refusal(source, f"its state_dict has the key {shown(key)} (names are strings)")
        if not isinstance(value, torch.Tensor):
            raise _refusal(
                source,
                f"its state_dict entry {shown(key)} is a {type(value).__name__}, not a tensor",
            )
        if value.layout != torch.strided or value.is_quantized or value.is_meta:
            raise _refusal(
                source, f"its state_dict entry {shown(key)} is not a dense tensor of values"
            )
    bad = next((k for k, v in state_dict.items() if not _finite(v)), None)
    if bad is not None:
        raise _refusal(
            source,
            f"the checkpoint's weights are not finite: {shown(bad)} holds NaN or inf (a diverged "
            "run?); pick an earlier checkpoint of the run, or retrain",
        )


def _finite(t) -> bool:
    import torch

    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return True
    if not t.is_contiguous():  # a crafted strided view: torch.load has read its storage
        return bool(torch.isfinite(t).all())
    flat = t.view(-1)
    return all(bool(torch.isfinite(part).all()) for part in flat.split(SLICE))


def without_legacy(state_dict: dict) -> dict:
    """The state dict without the `_forward.*` copy older checkpoints hold (`net.*` has it)."""
    return {k: v for k, v in state_dict.items() if not k.startswith(LEGACY)}


def check_tensors_fit(state_dict: dict, model_state: dict, source: str) -> None:
    """The checkpoint's tensors are the model's: the same keys, shapes and kinds of values
    (checked before `load_state_dict`: a huge extra tensor is never copied into the model)."""

    def problems():  # a mismatched shape first: it says most about the net held
        for key, ours in model_state.items():
            theirs = state_dict.get(key)
            if theirs is not None and tuple(theirs.shape) != tuple(ours.shape):
                yield f"{shown(key)} has shape {list(theirs.shape)} there, {list(ours.shape)} here"
            elif theirs is not None and ours.is_floating_point() and not theirs.is_floating_point():
                yield f"{shown(key)} holds {theirs.dtype} values there, {ours.dtype} here"
        yield from (f"it lacks {shown(k)}" for k in model_state if k not in state_dict)
        yield from (
            f"it has the unexpected entry {shown(k)}" for k in state_dict if k not in model_state
        )

    detail = next(problems(), None)
    if detail is not None:
        raise _refusal(
            source,
            f"its weights do not fit the model its stored config builds: {detail}; pass the "
            "checkpoint file of that run as train.py wrote it",
        )


# ------------------------------------------------- where our classes moved
#: old module -> the module it became
MOVED = {
    "litlab.data.vision_downloads": "litlab.domains.vision.downloads",
    "litlab.data.vision": "litlab.domains.vision.data",
    "litlab.data.images": "litlab.domains.vision.data",
    "litlab.models.vision": "litlab.domains.vision.module",
    "litlab.models.nets.cnn": "litlab.domains.vision.nets",
    "litlab.models.nets.resnet": "litlab.domains.vision.nets",
    "litlab.data.medical3d": "litlab.domains.medical3d.data",
    "litlab.data.medmnist3d": "litlab.domains.medical3d.data",
    "litlab.data.volumes": "litlab.domains.medical3d.volumes",
    "litlab.models.medical3d": "litlab.domains.medical3d.module",
    "litlab.models.nets.resnet3d": "litlab.domains.medical3d.nets",
    "litlab.models.nets.unet3d": "litlab.domains.medical3d.nets",
    "litlab.data.graph": "litlab.domains.graph.data",
    "litlab.data.tudataset": "litlab.domains.graph.data",
    "litlab.models.graph": "litlab.domains.graph.module",
    "litlab.models.nets.gnn": "litlab.domains.graph.nets",
    "litlab.data.table": "litlab.domains.table.data",
    "litlab.models.regression": "litlab.domains.table.module",
    "litlab.models.nets.table": "litlab.domains.table.nets",
    "litlab.data.slices": "litlab.domains.segmentation2d.data",
    "litlab.models.segmentation2d": "litlab.domains.segmentation2d.module",
    "litlab.models.nets.unet2d": "litlab.domains.segmentation2d.nets",
    "litlab.loggers.optional": "litlab.loggers",
    "litlab.loggers.resumable_csv": "litlab.loggers",
    "litlab.loggers.run_ids": "litlab.loggers",
    "litlab.callbacks.progress": "litlab.callbacks.summary",
    "litlab.callbacks.lr_monitor": "litlab.callbacks.summary",
    "litlab.compression.resize": "litlab.compression.prune",
    "litlab.loggers.mlflow": "litlab.loggers",
    "litlab.callbacks.inspect.samples": "litlab.callbacks.inspect",
    "litlab.checkpointing.last": "litlab.checkpointing.resume_state",
    "litlab.recipes.tuning": "litlab.runs.tuning",
    "litlab.compat.lightning_csv": "litlab.compat.lightning",
    "litlab.checkpointing.callback_states": "litlab.checkpointing.trust",
    "litlab.utils.plots": "litlab.tasks.figures",
    "litlab.models.base": "litlab.models",
    "litlab.recipes.train": "litlab.recipes",
    "litlab.recipes.report": "litlab.recipes",
    "litlab.callbacks.inspect.base": "litlab.callbacks.inspect",
    "litlab.callbacks.inspect.confusion": "litlab.callbacks.inspect",
    "litlab.callbacks.inspect.embeddings": "litlab.callbacks.inspect",
    "litlab.callbacks.inspect.gradcam": "litlab.callbacks.inspect",
    "litlab.callbacks.inspect.histograms": "litlab.callbacks.inspect",
    "litlab.tasks.outputs": "litlab.tasks.kind",
    "litlab.config.hydra_errors": "litlab.config.compose",
    "litlab.config.strategies": "litlab.config.build",
    "litlab.domains.vision.nets.cnn": "litlab.domains.vision.nets",
    "litlab.domains.vision.nets.resnet": "litlab.domains.vision.nets",
    "litlab.domains.medical3d.nets.resnet3d": "litlab.domains.medical3d.nets",
    "litlab.domains.medical3d.nets.unet3d": "litlab.domains.medical3d.nets",
    "litlab.domains.graph.nets.gnn": "litlab.domains.graph.nets",
    "litlab.domains.graph.nets.prune": "litlab.domains.graph.prune",
    "litlab.domains.table.nets.mlp": "litlab.domains.table.nets",
    "litlab.domains.segmentation2d.nets.unet2d": "litlab.domains.segmentation2d.nets",
    "litlab.domains.vision.images": "litlab.domains.vision.data",
    "litlab.domains.graph.pyg_files": "litlab.domains.graph.data",
    "litlab.domains.medical3d.medmnist3d": "litlab.domains.medical3d.data",
    "litlab.domains.graph.tudataset": "litlab.domains.graph.data",
    "litlab.config.external": "litlab.config.models",
    "litlab.tasks.static": "litlab.tasks",
    "litlab.profiling": "litlab.callbacks.summary",
    "litlab.domains.segmentation2d.files": "litlab.domains.segmentation2d.slices",
    "litlab.runs.ddp_callback": "litlab.runs.ddp",
    "litlab.data.base": "litlab.data",
    "litlab.data.splits": "litlab.data",
    "litlab.runs.predictions": "litlab.runs.summary",
}
#: the keys whose values name a class or function to build
NAME_KEYS = ("_target_", "base_target")


def current_name(name):
    """`name` with a moved module path replaced; anything else as it is."""
    if not isinstance(name, str):
        return name
    module, _, symbol = name.rpartition(".")
    return f"{MOVED[module]}.{symbol}" if module in MOVED else name


def renamed(config):
    """The stored config with moved targets renamed, in place, walked as the trust check walks
    it (`trust.config_nodes`: no recursion, no further than the depth and size it refuses);
    returned for convenience."""
    for _, node, _ in config_nodes(config):
        for key in NAME_KEYS if isinstance(node, dict) else ():
            if key in node:
                node[key] = current_name(node[key])
    return config
