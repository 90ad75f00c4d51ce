"""The out-of-distribution entry of an exported file's metadata (`litlab.export.ood`): its
scales and threshold in range, and its packed model arrays of the declared shapes, finite and
of a fitted model's size, so that no request's score can overflow or divide by zero."""

from litlab.tasks.checks import MAX_INT, SCALE_FLOOR, Bad, check_number, integer, require

MAX_OOD_DIMS, MAX_OOD_VALUE = 4096, 1e12


def check_ood(ood, channels: int | None) -> None:
    require(isinstance(ood, dict), "ood is not an object")
    check_number(ood.get("threshold"), "ood.threshold", -1e6, 1e6)
    parts = ood.get("parts")
    known = ("confidence", "input", "statistics")
    require(
        isinstance(parts, dict) and "confidence" in parts and set(parts) <= set(known),
        f"ood.parts must name some of {', '.join(known)}, confidence included",
    )
    for name, part in parts.items():
        require(isinstance(part, dict), f"ood.parts.{name} is not an object")
        check_number(part.get("median"), f"ood.parts.{name}.median", -1e9, 1e9)
        check_number(part.get("scale"), f"ood.parts.{name}.scale", SCALE_FLOOR, 1e9)
    if "test_count" in ood:
        integer(ood["test_count"], "ood.test_count", 1, MAX_INT)
    if "test_exceed_fraction" in ood:
        check_number(ood["test_exceed_fraction"], "ood.test_exceed_fraction", 0, 1)
    model = ood.get("model")
    require(
        (model is not None) == ("input" in parts) and (model is None or channels is not None),
        "ood.model must be present exactly when ood.parts has input (tensor inputs)",
    )
    if model is None:
        return
    require(set(parts) == set(known), f"ood.parts must be {', '.join(known)}")
    pca, stats = model.get("input"), model.get("statistics")
    require(isinstance(pca, dict) and isinstance(stats, dict), "ood.model is incomplete")
    require(
        "components" not in pca,
        "ood.model is in the form of exports before the compact one (components, variances)",
    )
    d = len(_array(pca.get("mean"), "ood.model.input.mean", (None,)))
    _whitening(pca, "ood.model.input", d)
    _array(stats.get("mean"), "ood.model.statistics.mean", (2 * channels,))
    _whitening(stats, "ood.model.statistics", 2 * channels)


def _array(value, what: str, shape: tuple):
    """An array of the OOD model as `litlab.export.ood.pack` stores it, of finite numbers in
    `shape` (None: any length up to MAX_OOD_DIMS)."""
    import numpy as np

    from litlab.export.ood import unpack

    try:
        array = unpack(value)
    except ValueError as err:
        raise Bad(f"{what} {err}") from None
    want = [MAX_OOD_DIMS if n is None else n for n in shape]
    require(
        array.ndim == len(shape)
        and all(n <= w if s is None else n == w for n, w, s in zip(array.shape, want, shape)),
        f"{what} has shape {list(array.shape)}; expected {[s or f'<= {MAX_OOD_DIMS}' for s in shape]}",
    )
    require(bool(np.isfinite(array).all()), f"{what} has entries that are not finite numbers")
    require(  # a distance squares them: larger would overflow every request's score
        bool((np.abs(array) <= MAX_OOD_VALUE).all()),
        f"{what} has entries larger than {MAX_OOD_VALUE:g} in size; expected a fitted model's",
    )
    return array


def _whitening(part: dict, what: str, n: int) -> None:
    """An upper-triangular n x n whitening (`litlab.export.ood.pack_model`): its diagonal and
    its column scales positive (a distance)."""
    import numpy as np

    array = _array(part.get("whitening"), f"{what}.whitening", (n * (n + 1) // 2,))
    diagonal = array[np.cumsum([0, *range(n, 1, -1)])] if n else array
    scales = _array(part.get("column_scales"), f"{what}.column_scales", (n,))
    require(
        bool((diagonal > 0).all() and (scales > 0).all()),
        f"{what}.whitening has a diagonal entry or column scale <= 0; expected > 0",
    )
