"""litlab: a Lightning + Hydra research template (vision, 3D medical imaging, graphs).

Importing the package is cheap on purpose: torch and lightning are imported by the modules
that need them, after Hydra has parsed the command line. `from litlab import train, evaluate`
gives the Python API (`litlab.api`), loaded on first use.
"""

from litlab.compat import rfc3987

__version__ = "0.1.0"  # keep equal to pyproject.toml (stored in exported files)

# before MONAI or Ray import jsonschema: its IRI grammar costs seconds of every such start-up
rfc3987.defer()

__all__ = ["evaluate", "train"]


def __getattr__(name: str):
    if name in __all__:
        from litlab import api

        return getattr(api, name)
    raise AttributeError(f"module 'litlab' has no attribute {name!r}")
