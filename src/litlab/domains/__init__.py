"""The domains: what a researcher reads and changes, one folder each (a domain's datamodules,
its LightningModule and its nets side by side, as a MONAI bundle or a torchtune model family
keeps them), apart from the machinery they run on (litlab.data.base and litlab.models.base,
recipes, checkpointing, export, serving). `make new-task NAME=x FROM=vision` copies one domain
into `domains/x/` (docs/new_task.md).

Each folder holds `data.py` (datamodules: read, split, `dims`), `module.py` (the
LightningModule: loss, metrics, steps) and `nets/` (plain nn.Modules built from config plus the
datamodule's dims: they import no litlab module above them, so a checkpoint may name them).
"""
