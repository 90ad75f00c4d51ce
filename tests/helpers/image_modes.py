"""Real digits (white ink on black, 8-bit grey) saved the ways clients save images: with a
transparent background in either ink colour, as palettes, 16-bit, float, CMYK, JPEG, bigger,
and stored sideways or mirrored with an EXIF orientation, as phones and scanners store them.
Used by tests/test_serve.py (over HTTP) and bench/serve_hostile.py."""

import io

import numpy as np
from PIL import Image

from helpers.serve import multipart, request


def _save(img: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def rgba(a: np.ndarray, ink: int) -> bytes:
    """One ink colour drawn on a fully transparent canvas: alpha carries the digit."""
    colour = np.full((*a.shape, 3), ink, np.uint8)
    return _save(Image.fromarray(np.dstack([colour, a]), "RGBA"))


def palette(a: np.ndarray) -> bytes:
    """17 grey levels as a palette whose entry 0 is transparent white (a typical export)."""
    levels = np.round(a / 255 * 16).astype(np.uint8)
    img = Image.fromarray(levels, "P")
    pal = [255, 255, 255] + [v for k in range(1, 17) for v in [round(k * 255 / 16)] * 3]
    img.putpalette(pal + [0] * (768 - len(pal)))
    return _save(img, transparency=0)


#: EXIF orientation -> how the upright picture is stored (what the tag undoes)
STORED_AS = {
    3: Image.Transpose.ROTATE_180,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    8: Image.Transpose.ROTATE_270,
}


def oriented(a: np.ndarray, orientation: int, fmt: str = "PNG", **kw) -> bytes:
    """The digit stored transformed, with the EXIF orientation that shows it upright."""
    stored = Image.fromarray(a).transpose(STORED_AS[orientation])
    if fmt == "TIFF":
        return _save(stored, "TIFF", tiffinfo={0x0112: orientation})
    exif = Image.Exif()
    exif[0x0112] = orientation
    return _save(stored, fmt, exif=exif, **kw)


LOSSLESS = {  # same pixels as the 8-bit grey PNG, other encodings
    "L 8-bit": lambda a: _save(Image.fromarray(a)),
    "RGB": lambda a: _save(Image.fromarray(np.dstack([a] * 3))),
    "RGBA white ink, transparent": lambda a: rgba(a, 255),
    "RGBA black ink, transparent": lambda a: rgba(a, 0),
    "LA black ink": lambda a: _save(Image.fromarray(np.dstack([np.zeros_like(a), a]), "LA")),
    "palette, transparent white": palette,
    "grey, tRNS black": lambda a: _save(Image.fromarray(a), transparency=0),
    "16-bit grey": lambda a: _save(Image.fromarray(a.astype(np.uint16) * 257)),
    "float TIFF": lambda a: _save(Image.fromarray(a.astype(np.float32) / 255), "TIFF"),
    "RGBA, opaque": lambda a: _save(Image.fromarray(np.dstack([a] * 3 + [a * 0 + 255]))),
    "PNG, EXIF rotated 90": lambda a: oriented(a, 6),
    "TIFF, EXIF transposed": lambda a: oriented(a, 5, "TIFF"),
}
LOSSY = {  # compressed or resampled: close to, not equal to, the 8-bit PNG
    "CMYK JPEG": lambda a: _save(
        Image.fromarray(np.dstack([a] * 3)).convert("CMYK"), "JPEG", quality=100, subsampling=0
    ),
    "grey JPEG q90": lambda a: _save(Image.fromarray(a), "JPEG", quality=90),
    "RGB 32x32": lambda a: _save(
        Image.fromarray(np.dstack([a] * 3)).resize((32, 32), Image.Resampling.NEAREST)
    ),
    "JPEG q90, EXIF rotated 270": lambda a: oriented(a, 8, "JPEG", quality=90),
    "JPEG q90, EXIF rotated 180": lambda a: oriented(a, 3, "JPEG", quality=90),
}
MODES = {**LOSSLESS, **LOSSY}


def far_from_digits(seed: int = 0) -> dict[str, bytes]:
    """Inputs no digits model should be sure about."""
    rng = np.random.default_rng(seed)
    return {
        "noise 640x480": _save(Image.fromarray(rng.integers(0, 256, (480, 640), np.uint8))),
        "colour noise 64x64": _save(Image.fromarray(rng.integers(0, 256, (64, 64, 3), np.uint8))),
        "noise 8x8": _save(Image.fromarray(rng.integers(0, 256, (8, 8), np.uint8))),
        "blank black": _save(Image.new("L", (8, 8), 0)),
        "blank white": _save(Image.new("L", (8, 8), 255)),
        "grey 128": _save(Image.new("L", (100, 100), 128)),
        "fully transparent": _save(Image.new("RGBA", (8, 8), (0, 0, 0, 0))),
    }


def digits_test_split(n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    from litlab.domains.vision.data import DigitsDataModule

    dm = DigitsDataModule()
    dm.setup()
    images = (dm.test_set.images[:n, 0].numpy() * 255).round().astype(np.uint8)
    return images, dm.test_set.labels[:n].numpy()


def classify_over_http(url: str, files: list[bytes]) -> tuple[list[int], list[bool]]:
    ids, flagged = [], []
    for i in range(0, len(files), 4):
        body, kind = multipart([(f"{j}.img", f) for j, f in enumerate(files[i : i + 4])])
        status, out = request(url + "/predict", body, kind)
        assert status == 200, out
        ids += out["class_ids"]
        flagged += out["out_of_distribution"]
    return ids, flagged


def mode_accuracy(url: str, n: int | None) -> dict[str, tuple[float, float, list[int]]]:
    """Per image mode: accuracy, share flagged out-of-distribution, predictions."""
    images, labels = digits_test_split(n)
    out = {}
    for name, save in MODES.items():
        ids, flagged = classify_over_http(url, [save(a) for a in images])
        out[name] = (float(np.mean(np.asarray(ids) == labels)), float(np.mean(flagged)), ids)
    return out


def check_modes(results: dict) -> None:
    reference_acc, _, reference = results["L 8-bit"]
    for name, (acc, flagged, ids) in results.items():
        assert acc >= 0.95 and acc >= reference_acc - 0.02, (name, acc, reference_acc)
        assert flagged <= 0.1, (name, flagged)  # the digits stay in distribution
        if name in LOSSLESS:  # the same pixels: the same answers
            assert ids == reference, name
