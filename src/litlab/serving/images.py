"""Uploaded images -> model inputs, as the training pipeline saw its images.

Every common mode is read for what it means, not squeezed through `convert("L")` (which drops
alpha and clips 16-bit values): transparency is composited onto the training images'
background stored in the export (`background`); 16-bit and float images keep their range;
grey and RGB convert as training did (ITU-R 601 luma, as PIL and torchvision's Grayscale).
Size and frames are checked from the header before any pixel is decoded (`check_header`: a
decompression bomb costs its header's bytes), and every image is turned upright by its EXIF
orientation (`prepare`): a phone stores a portrait photo sideways with a tag. A JSON body is
parsed once it is known to hold only numbers nested a few deep (`parse_json`)."""

import functools
import io
import json
import re

import numpy as np

from litlab.tasks.checks import BadRequest

FORMATS = ("PNG", "JPEG", "TIFF", "GIF", "WEBP")
NOT_AN_IMAGE = "An uploaded file is not a readable PNG, JPEG, TIFF, GIF or WebP image."
#: what Pillow raises on bytes it cannot read: besides OSError and ValueError, a corrupt file
#: can raise TypeError ("Missing dimensions"), KeyError, IndexError, struct.error...
CORRUPT = "An uploaded image is truncated or corrupt."
UNIFORM_INK = 0.06  # weighted std of the visible colour below which alpha is the drawing
LUMA = np.asarray([0.299, 0.587, 0.114], np.float32)
#: PNG text chunks are decompressed by Image.open; nothing here reads them
MAX_TEXT_BYTES = 64 << 10
#: frames of a multi-frame upload counted for its refusal (each one a seek, on the event loop)
MAX_FRAMES_COUNTED = 1000
ORIENTATION = 0x0112  # the EXIF tag; 1 is upright, 2-8 mirrored and/or rotated


def _pil():
    from PIL import Image, PngImagePlugin

    PngImagePlugin.MAX_TEXT_CHUNK = MAX_TEXT_BYTES
    PngImagePlugin.MAX_TEXT_MEMORY = 4 * MAX_TEXT_BYTES
    return Image


def check_header(raw: bytes, max_pixels: int):
    """Open (header only) and check the pixel budget: the PIL image, not yet decoded."""
    Image = _pil()
    from PIL import UnidentifiedImageError

    if not raw:
        raise BadRequest("An uploaded file is empty.")
    try:
        img = Image.open(io.BytesIO(raw), formats=FORMATS)  # no other decoder is tried
        width, height = img.size
    except Image.DecompressionBombError:  # PIL's own header check, past 2 x 89 M pixels
        raise BadRequest(
            f"An uploaded image has more pixels than the limit of {max_pixels:,} per image "
            "(serve setting max_image_pixels).",
            413,
        ) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise BadRequest(NOT_AN_IMAGE, 415) from None
    except Exception:  # noqa: BLE001 (any other parse error of untrusted bytes)
        raise BadRequest(CORRUPT, 415) from None
    if width < 1 or height < 1 or width * height > max_pixels:
        raise BadRequest(
            f"An uploaded image has {width}x{height} pixels; the limit is {max_pixels:,} "
            "pixels per image (serve setting max_image_pixels).",
            413,
        )
    if (frames := _frames(img)) > 1:
        many = f"more than {MAX_FRAMES_COUNTED}" if frames > MAX_FRAMES_COUNTED else frames
        raise BadRequest(
            f"An uploaded image has {many} frames (pages or animation); the model classifies "
            "one image per file: send each frame as a file of its own.",
            422,
        )
    return img


def _frames(img) -> int:
    """Frames in the file (MPO: 1, its primary picture); a TIFF's pages are counted up to
    MAX_FRAMES_COUNTED + 1 (a chain: a seek each), other formats' from their headers or
    blocks (bounded by the body size)."""
    try:
        if img.format == "MPO" or not getattr(img, "is_animated", False):
            return 1
        if img.format != "TIFF":
            return img.n_frames
        count = 1
        try:
            while count <= MAX_FRAMES_COUNTED:
                img.seek(count)
                count += 1
        except EOFError:
            pass
        return count
    except Exception:  # noqa: BLE001 (Pillow's parse errors of untrusted bytes: see CORRUPT)
        raise BadRequest(CORRUPT, 415) from None


def prepare(img, size: int) -> tuple:
    """A header-checked image upright as its EXIF orientation says (any format: JPEG, TIFF,
    PNG eXIf); a large JPEG is first decoded at a fraction of its size (DCT scaling). Returns
    it and the size (width, height) the upload is shown at, as stored before that scaling
    (orientations 5-8 swap the sides): what a label map is cut back to."""
    from PIL import ImageOps

    width, height = img.size
    try:
        if img.format in ("JPEG", "MPO"):
            img.draft(None, (size, size))  # DCT scaling: decode big photos at a fraction
        orientation = img.getexif().get(ORIENTATION, 1)
        if orientation in range(2, 9):
            img = ImageOps.exif_transpose(img)
    except Exception:  # noqa: BLE001 (Pillow's parse errors of untrusted bytes: see CORRUPT)
        raise BadRequest(CORRUPT, 415) from None
    return img, ((height, width) if orientation in (5, 6, 7, 8) else (width, height))


def _working_mode(img):
    """The image in one of L, LA, RGB, RGBA, I, F (what resize and numpy handle), and the
    value that means "full intensity" in it."""
    mode, info = img.mode, img.info
    if mode in ("1", "L") and "transparency" not in info:
        return img.convert("L"), 255.0
    if mode in ("L", "LA", "La"):
        return img.convert("LA"), 255.0
    if mode == "P" or mode == "PA":
        return img.convert("RGBA" if ("transparency" in info or mode == "PA") else "RGB"), 255.0
    if mode == "RGB" and "transparency" in info:
        return img.convert("RGBA"), 255.0
    if mode in ("RGB", "RGBA"):
        return img, 255.0
    if mode in ("RGBa", "RGBX", "CMYK", "YCbCr"):
        return img.convert("RGBA" if mode == "RGBa" else "RGB"), 255.0
    if mode.startswith("I;16"):
        return img.convert("I"), 65535.0
    if mode == "I":
        lo, hi = img.getextrema()
        return img, 65535.0 if lo >= 0 and hi <= 65535 else 2**31 - 1.0
    if mode == "F":
        return img, 1.0
    raise BadRequest(
        f"An uploaded image has mode {mode}; supported: grey, RGB, with alpha or a palette, "
        "16-bit, float, CMYK, YCbCr.",
        415,
    )


def _composite(colour: np.ndarray, alpha: np.ndarray, background: np.ndarray) -> np.ndarray:
    """(H, W, C) colour and (H, W) alpha in [0, 1] onto the training background."""
    weight = alpha.sum()
    if weight <= 0:
        return np.broadcast_to(background, colour.shape).astype(np.float32)
    a = alpha[..., None]
    mean = (colour * a).sum((0, 1)) / weight
    spread = np.sqrt(((colour - mean) ** 2 * a).sum((0, 1)) / weight)
    if (spread < UNIFORM_INK).all():  # one ink colour: the alpha is the drawing
        colour = np.broadcast_to(1 - background, colour.shape)  # the training contrast
    return background + a * (colour - background)


def decode(img, layout: dict) -> np.ndarray:
    """A prepared PIL image (`prepare`) -> (C, H, W) float32 normalized as in training."""
    Image = _pil()
    channels, size = int(layout["channels"]), int(layout["image_size"])
    norm = layout["x"]["normalization"]
    try:
        img, full = _working_mode(img)
        if img.size != (size, size) and layout.get("fit") == "pad":
            img = _padded(img, size, Image)
        elif img.size != (size, size):  # area means down (as digits were made), bilinear up
            down = img.size[0] >= size and img.size[1] >= size
            img = img.resize(
                (size, size), Image.Resampling.BOX if down else Image.Resampling.BILINEAR
            )
        pixels = np.asarray(img, dtype=np.float32)
    except BadRequest:
        raise
    except Exception:  # noqa: BLE001 (Pillow's parse errors of untrusted bytes: see CORRUPT)
        raise BadRequest(CORRUPT, 415) from None
    if img.mode == "F" and not (
        np.isfinite(pixels).all() and 0 <= pixels.min() <= pixels.max() <= 1
    ):
        raise BadRequest("A float image must hold values in [0, 1].", 422)
    pixels = pixels.reshape(size, size, -1) / full
    has_alpha = img.mode in ("LA", "RGBA")
    colour = pixels[..., :-1] if has_alpha else pixels
    if colour.shape[2] == 3 and channels == 1:
        colour = colour @ LUMA[:, None]
    elif colour.shape[2] == 1 and channels == 3:
        colour = np.repeat(colour, 3, axis=2)
    if has_alpha:
        background = np.asarray(layout.get("background", [0.0] * channels), np.float32)
        colour = _composite(colour, pixels[..., -1], background)
    mean = np.asarray(norm["mean"], np.float32)
    std = np.asarray(norm["std"], np.float32)
    return ((colour - mean) / std).transpose(2, 0, 1).astype(np.float32)


def _padded(img, size: int, Image):
    """The image centred on a size x size canvas of zeros, as a model trained on zero-padded
    slices saw them (`inputs.fit` "pad"); a larger one is refused."""
    width, height = img.size
    if width > size or height > size:
        raise BadRequest(
            f"The image is {width}x{height}; this model takes images of at most {size}x{size} "
            "(smaller ones are zero-padded, centred, as its training images were).",
            422,
        )
    canvas = Image.new(img.mode, (size, size))
    canvas.paste(img, ((size - width) // 2, (size - height) // 2))
    return canvas


def fast_path(img, layout: dict):
    """8-bit grey/RGB at the training size, no transparency (what most clients send): the
    normalized array straight away, or None."""
    mode = "L" if int(layout["channels"]) == 1 else "RGB"
    size = int(layout["image_size"])
    if img.mode != mode or img.size != (size, size) or "transparency" in img.info:
        return None

    try:
        pixels = np.asarray(img, dtype=np.float32)
    except Exception:  # noqa: BLE001 (Pillow's parse errors of untrusted bytes: see CORRUPT)
        raise BadRequest(CORRUPT, 415) from None
    pixels = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
    norm = layout["x"]["normalization"]
    scale, shift = affine(tuple(norm["mean"]), tuple(norm["std"]))
    return pixels * scale + shift


# ---------------------------------------------------------------- inputs
#: JSON strings (keys): removed before looking for literals and brackets
STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
#: +1 for [ and {, -1 for ] and }
NESTING = np.zeros(256, np.int8)
NESTING[[91, 123]], NESTING[[93, 125]] = 1, -1


def depth(stripped: bytes) -> int:
    """Deepest bracket nesting of a JSON text without its strings (vectorized, no parsing)."""
    steps = NESTING[np.frombuffer(stripped, np.uint8)]
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def parse_json(body: bytes, max_depth: int = 8) -> dict:
    """The body as a JSON object whose values hold only numbers, nested at most `max_depth`
    deep: checked on the text before it is parsed (deep nesting never reaches the parser)."""
    if not body.strip():
        raise BadRequest("The request body is empty.")
    stripped = STRING.sub(b'""', body)
    if (d := depth(stripped)) > max_depth:
        raise BadRequest(
            f"The JSON body is nested {d} deep; the limit is {max_depth} "
            "(serve setting max_json_depth).",
            422,
        )
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRequest("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise BadRequest('The JSON body must be an object, e.g. {"inputs": [...]}.', 422)
    if any(word in stripped for word in (b"true", b"false", b"null")):  # no number has them
        raise BadRequest("JSON inputs hold only numbers: no true, false or null.", 422)
    return data


def _no_constant(name: str):
    raise BadRequest(f"JSON inputs must be finite numbers, not {name}.", 422)


@functools.lru_cache(maxsize=8)
def affine(mean: tuple, std: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(1 / (255 std), -mean / std) per channel: 8-bit pixels normalized in one pass."""
    m = np.asarray(mean, np.float32).reshape(-1, 1, 1)
    s = np.asarray(std, np.float32).reshape(-1, 1, 1)
    return 1 / (255 * s), -m / s
