"""Which compression steps apply to which task, checked from the checkpoint's stored config
before any data is read or model built: a step that does not apply is one line naming those
that do. (One table, kept apart so that a task adapter can hold it.)"""

from litlab.errors import UserError
from litlab.tasks import (
    GRAPH_CLASSIFICATION,
    IMAGE_CLASSIFICATION,
    NODE_CLASSIFICATION,
    VOLUME_CLASSIFICATION,
    VOLUME_SEGMENTATION,
)

BOTH = ("structured", "unstructured")
# task -> {step: the prune methods (prune) or True}
APPLIES = {
    IMAGE_CLASSIFICATION: {"prune": BOTH, "distill": True, "quantize": True},
    VOLUME_CLASSIFICATION: {"prune": BOTH, "distill": True, "quantize": True},
    # channels pruned out of a U-Net's skip concatenations, distillation of voxel maps and
    # int8 through sliding windows are not implemented: export.py writes the int8 file
    VOLUME_SEGMENTATION: {"prune": ("unstructured",)},
    # message passing has no channels to remove; int8 of a graph net: export.py
    NODE_CLASSIFICATION: {"prune": ("unstructured",), "distill": True},
    GRAPH_CLASSIFICATION: {"prune": ("unstructured",), "distill": True},
}
INT8_HINT = "for an int8 file use python src/export.py ckpt_path=... formats=[onnx_int8]"


def what_applies(task: str) -> str:
    steps = APPLIES.get(task, {})
    named = [
        f"prune (compress.prune.method={'|'.join(v)})" if k == "prune" else k
        for k, v in steps.items()
    ]
    return ", ".join(named) or "nothing"


def check(task: str, compress_cfg) -> None:
    """One line when a chosen step (or prune method) does not apply to `task`."""
    steps = APPLIES.get(task, {})
    for name in compress_cfg:
        ok = name in steps
        if ok and name == "prune":
            method = compress_cfg.prune.method
            ok = method in steps["prune"]
            name = f"prune with compress.prune.method={method}"
        if not ok:
            hint = f"; {INT8_HINT}" if "quantize" not in steps else ""
            raise UserError(
                f"compress: {name} does not apply to a {task} checkpoint; what applies: "
                f"{what_applies(task)}{hint}"
            )


def stored_task(ckpt_path) -> str:
    """The task of the run that wrote `ckpt_path`, from its stored config (its data class is
    checked against the trust allowlist before it is imported)."""
    import hydra

    from litlab.checkpointing.load import load
    from litlab.checkpointing.run_config import CONFIG_KEY
    from litlab.checkpointing.trust import check_targets

    stored = load(ckpt_path, mmap=True)[CONFIG_KEY]
    data = {"data": {"_target_": stored["data"]["_target_"]}}
    check_targets(data, str(ckpt_path))
    return hydra.utils.get_class(data["data"]["_target_"]).task
