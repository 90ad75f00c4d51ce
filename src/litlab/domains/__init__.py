"""The domains: what a researcher reads and changes, one folder each (a domain's datamodules,
its LightningModule and its nets side by side, as a MONAI bundle or a torchtune model family
keeps them), apart from the machinery they run on (litlab.data and litlab.models, recipes,
checkpointing, export, serving). `make new-task NAME=x FROM=vision` copies one domain into
`domains/x/` (docs/new_task.md).

Each folder holds `data.py` (datamodules: read, split, `dims`), `module.py` (the
LightningModule: loss, metrics, steps) and `nets.py` (plain nn.Modules built from config plus the
datamodule's dims: they import no litlab module above them, so a checkpoint may name them), and
declares them in its `__init__.py` (`DOMAIN`), as a MONAI bundle's metadata does. What only a
domain knows stays in its folder: how a net narrows into a distillation student
(`narrowed(net_config, scale)`, or `student`: a smaller net's model config) or prunes itself
where Torch-Pruning cannot trace it (the GNN), what an exported file's inputs are.
"""

import importlib
import pkgutil
from dataclasses import dataclass

from litlab.errors import UserError


@dataclass(frozen=True)
class Template:
    """What `make new-task NAME=x FROM=<domain>` copies (paths inside the domain's folder):
    the datamodule class and the net (a class or a factory, with its module's own helpers
    imported from where they are), their configs, and the bar the copy's test checks."""

    data: str  # "data.DigitsDataModule"
    net: str  # "nets.SmallCNN"
    data_config: str  # configs/data/<name>.yaml
    model_config: str  # configs/model/<name>.yaml: names the LightningModule the copy uses
    metric: str  # the test metric the copied test checks...
    bar: float  # ... and the value it must beat after a short run of `epochs`
    epochs: int


@dataclass(frozen=True)
class Domain:
    """A domain folder's declaration (its `__init__.py`'s `DOMAIN`): paths inside the folder."""

    datamodules: tuple[str, ...]
    modules: tuple[str, ...]
    nets: tuple[str, ...]
    template: Template


def declarations() -> dict[str, Domain]:
    """Every domain folder's declaration, by folder name (light: no torch); one line naming a
    folder that declares none."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.ispkg:
            continue
        declared = getattr(importlib.import_module(f"{__name__}.{info.name}"), "DOMAIN", None)
        if not isinstance(declared, Domain):
            raise UserError(
                f"src/litlab/domains/{info.name}/__init__.py declares no DOMAIN (a "
                "litlab.domains.Domain: the folder's datamodules, modules, nets and what make "
                "new-task copies; see docs/new_task.md)"
            )
        found[info.name] = declared
    return found
