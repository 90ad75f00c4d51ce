"""pytest and pytest-xdist internals the test suite uses (checked against pytest 9.2.0 and
pytest-xdist 3.8.0): `--dist loadgroup` sends a group to one worker by the `@group` suffix of a
test's node id, which xdist writes to `item._nodeid` but pytest 9 reads from `item._id` (a
`_pytest.nodeid.NodeId`). tests/test_compat.py checks that these still exist."""

CHECKED_WITH = {"pytest": "9.2.0", "pytest-xdist": "3.8.0"}


def set_node_id(item, nodeid: str) -> None:
    from _pytest.nodeid import NodeId

    item._id = NodeId.parse(nodeid)


def check(item) -> None:
    """`item` (a collected test) still has the node id this module rewrites."""
    import pytest

    try:
        from _pytest.nodeid import NodeId
    except ImportError:
        raise AssertionError(
            f"pytest {pytest.__version__} has no _pytest.nodeid.NodeId (checked against "
            f"{CHECKED_WITH}): update tests/helpers/xdist_compat.py"
        ) from None
    if not isinstance(getattr(item, "_id", None), NodeId) or str(item._id) != item.nodeid:
        raise AssertionError(
            f"pytest {pytest.__version__} no longer keeps a test's node id in item._id "
            f"(checked against {CHECKED_WITH}): update tests/helpers/xdist_compat.py"
        )
