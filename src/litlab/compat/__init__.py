"""The one fence around other libraries' private APIs: every `_name` of Lightning, Hydra, Ray,
Optuna and torch that litlab reaches is reached here, one module per library, with the
version it was checked against. `tests/test_compat.py` runs each module's `check_<library>()`,
so an upgrade that moves one fails there with the name and the version, not somewhere inside
a run. (pytest-xdist's, used by the test suite only, are in tests/helpers/xdist_compat.py.)"""


class CompatError(RuntimeError):
    """A private API litlab relies on is gone or changed: the message names it and the version
    it was checked against."""


def missing(library: str, checked: str, installed: str, what: str) -> CompatError:
    return CompatError(
        f"{library} {installed} no longer has {what} (litlab was checked against {library} "
        f"{checked}): update litlab/compat/{library.split('-')[0].lower()}.py"
    )
