"""Annotations with bounds, for the parameters of litlab's classes: `config.validate` reads
them from the signatures and refuses a bad value in one line before anything is built.

    def __init__(self, batch_size: PosInt = 64, dropout: Probability = 0.3): ...

Metadata are annotated_types' (Ge, Gt, Interval, MinLen...); a string in the metadata is the
text shown to the user. A leaf module: nets, data and models import it.

Every float is finite: `config.models` refuses nan and inf for any `float`
annotation (bounded or not) and the settings models refuse them (`allow_inf_nan=False`), so
`lr=inf` or `dropout=nan` never reaches a constructor, whatever bounds a parameter declares.
"""

import math
import os
from typing import Annotated, Literal

import annotated_types as at

#: on every float alias below, so pydantic's settings models refuse nan and inf as well
FINITE = at.Predicate(math.isfinite)
PosInt = Annotated[int, at.Ge(1)]
NonNegInt = Annotated[int, at.Ge(0)]
NonNegFloat = Annotated[float, at.Ge(0), FINITE]
PosFloat = Annotated[float, at.Gt(0), FINITE]
#: dropout, label smoothing: 1 would zero everything
Probability = Annotated[float, at.Interval(ge=0, lt=1), "a probability in [0, 1)"]
#: a held-out share: both parts non-empty
Fraction = Annotated[float, at.Interval(gt=0, lt=1)]
#: a share where 0 means "none held out"
OptionalFraction = Annotated[float, at.Interval(ge=0, lt=1)]
#: a learning rate: above 10 every optimizer litlab ships diverges in its first steps (1e30, inf)
LearningRate = Annotated[
    float, at.Interval(gt=0, le=10), FINITE, "a learning rate > 0 and <= 10 (e.g. 1e-3)"
]
#: dataloader worker processes: beyond 4 per CPU they only compete (and each is a process:
#: `num_workers=100000` would start them all)
MAX_WORKERS = 4 * (os.cpu_count() or 1)
Workers = Annotated[
    int,
    at.Interval(ge=0, le=MAX_WORKERS),
    f"an integer from 0 to {MAX_WORKERS} (4 per CPU of this machine)",
]
#: numpy and Lightning accept seeds in [0, 2**32 - 1]
Seed = Annotated[int, at.Interval(ge=0, le=2**32 - 1), "an integer in [0, 4294967295]"]
MinMax = Annotated[Literal["min", "max"], "min or max"]
#: the sides a served model takes (serving.metadata refuses a file beyond them): an image side
#: of 60000 would pad or resize every image to a 13 GiB canvas before it failed anywhere
MAX_IMAGE_SIDE, MAX_VOLUME_SIDE = 4096, 1024
ImageSide = Annotated[
    int, at.Interval(ge=1, le=MAX_IMAGE_SIDE), f"an integer from 1 to {MAX_IMAGE_SIDE} (pixels)"
]
VolumeSide = Annotated[
    int, at.Interval(ge=1, le=MAX_VOLUME_SIDE), f"an integer from 1 to {MAX_VOLUME_SIDE} (voxels)"
]
#: a 3D patch (the sliding window of evaluation): three sides
PatchSize = Annotated[list[VolumeSide], at.MinLen(3), at.MaxLen(3)]
#: classes of a segmentation, background included: label maps are held and answered in 8 bits
MAX_SEGMENT_CLASSES = 256
SegmentClasses = Annotated[
    int,
    at.Interval(ge=2, le=MAX_SEGMENT_CLASSES),
    f"an integer from 2 to {MAX_SEGMENT_CLASSES} (background included; label maps are 8-bit)",
]
Interval, Ge, Gt, MinLen, MaxLen = at.Interval, at.Ge, at.Gt, at.MinLen, at.MaxLen
