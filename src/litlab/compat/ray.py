"""Ray internals litlab uses (checked against ray 2.55.1).

- `ray._private.node.Node.__init__` and `ray._private.services.start_ray_process`: wrapped
  while `ray.init` runs, so that the agents get their ports up front and the raylet waits for
  none (federated/processes.agents_on_given_ports).
"""

CHECKED_WITH = "2.55.1"


def _fail(what: str):
    import ray

    from litlab.compat import missing

    return missing("ray", CHECKED_WITH, ray.__version__, what)


def node_and_services():
    """(Ray's node module, its services module), or None where they are not as expected:
    then the caller changes nothing."""
    try:
        from ray._private import node, services
    except ImportError:
        return None
    if not hasattr(node.Node, "__init__") or not hasattr(services, "start_ray_process"):
        return None
    return node, services


def check_ray() -> None:
    if node_and_services() is None:
        raise _fail("ray._private.node.Node / ray._private.services.start_ray_process")
