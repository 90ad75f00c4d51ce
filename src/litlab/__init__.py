"""litlab: a Lightning + Hydra research template (vision, 3D medical imaging, graphs).

Importing the package is cheap on purpose: torch and lightning are imported by the modules
that need them, after Hydra has parsed the command line.
"""

__version__ = "0.1.0"  # keep equal to pyproject.toml (stored in exported files)
