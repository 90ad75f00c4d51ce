"""The private APIs litlab reaches (litlab/compat/, tests/helpers/xdist_compat.py) still exist
in the installed versions; when an upgrade removes one, the failure names it and the version
it was checked against."""

import pytest
from helpers import xdist_compat

from litlab.compat import CompatError, hydra, lightning, optuna, torch, torch_pruning


@pytest.mark.parametrize(
    "library", [lightning, hydra, optuna, torch, torch_pruning], ids=lambda m: m.__name__
)
def test_private_apis_still_exist(library):
    library.check()


def test_a_removed_private_api_is_named_with_the_checked_version(monkeypatch):
    from hydra.core import utils

    monkeypatch.delattr(utils, "_save_config")
    with pytest.raises(CompatError, match=r"hydra.core.utils._save_config .*hydra-core 1\.3\.8"):
        hydra.check()


def test_pytest_keeps_the_node_id_that_loadgroup_rewrites(request):
    xdist_compat.check(request.node)
