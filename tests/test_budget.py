"""The suite's own budget (issue #49): a whole `make test` whose worker time grows past
tests/helpers/budget.py's figure fails, naming the slowest checks."""

from helpers.budget import DEFAULT_MARKERS, WORKER_BUDGET_S, over_budget


def test_a_suite_within_its_budget_passes_and_one_over_it_fails_naming_the_slowest():
    within = {f"tests/test_a.py::test_{i}": WORKER_BUDGET_S / 100 for i in range(100)}
    assert over_budget(within) is None
    over = {**within, "tests/test_b.py::test_new@digits": 30.0}
    message = over_budget(over)
    assert message is not None and "\n" not in message
    assert f"over its budget of {WORKER_BUDGET_S:.0f} s" in message
    assert "tests/test_b.py::test_new 30 s" in message  # the group suffix is not shown


def test_the_budget_applies_to_what_make_test_selects(pytestconfig):
    """The markers pyproject gives `make test` are the ones the budget is checked under."""
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    addopts = tomllib.loads(pyproject.read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert f"-m '{DEFAULT_MARKERS}'" in addopts
