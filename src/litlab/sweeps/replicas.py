"""Replicas of a sweep's configurations: jobs whose overrides differ only in a replica key
(seed, fold) form a group, and each job's replica overrides (`data.fold=3`) name the fold or
seed it ran, which matches jobs of different groups for a paired comparison."""


def _replica_key(override: str, replica_keys) -> bool:
    return override.split("=", 1)[0].lstrip("+~").rsplit(".", 1)[-1] in replica_keys


def replica_groups(records: list[dict], replica_keys) -> dict[str, list[dict]]:
    """Completed jobs grouped by their overrides without the replica keys (seed, fold); each
    job a copy with its `replica`: its replica overrides (`data.fold=3`), which match the jobs
    of different groups that ran the same fold or seed."""
    groups: dict[str, list[dict]] = {}
    common = set.intersection(*(set(r["overrides"]) for r in records)) if records else set()
    for r in records:
        if r["status"] != "completed":
            continue
        rest = [o for o in r["overrides"] if o not in common and not _replica_key(o, replica_keys)]
        replica = " ".join(sorted(o for o in r["overrides"] if _replica_key(o, replica_keys)))
        groups.setdefault(" ".join(rest) or "(no other overrides)", []).append(
            {**r, "replica": replica}
        )
    return groups


def marked_best(records: list[dict], groups: dict[str, list[dict]], best_group, best: int | None):
    """The indices of the jobs marked best: the best group's jobs when the sweep compares
    groups (one job of it is one fold or seed, not the best configuration), else `best`, the
    best job's."""
    if best_group is None:
        return set() if best is None else {best}
    dirs = {r["run_dir"] for r in groups[best_group]}
    return {i for i, r in enumerate(records) if r["status"] == "completed" and r["run_dir"] in dirs}
