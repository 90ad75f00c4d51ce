"""Annotations with bounds, for the parameters of litlab's classes: `config.validate` reads
them from the signatures and refuses a bad value in one line before anything is built.

    def __init__(self, batch_size: PosInt = 64, dropout: Probability = 0.3): ...

Metadata are annotated_types' (Ge, Gt, Interval, MinLen...); a string in the metadata is the
text shown to the user. A leaf module: nets, data and models import it.
"""

from typing import Annotated, Literal

import annotated_types as at

PosInt = Annotated[int, at.Ge(1)]
NonNegInt = Annotated[int, at.Ge(0)]
NonNegFloat = Annotated[float, at.Ge(0)]
PosFloat = Annotated[float, at.Gt(0)]
#: dropout, label smoothing: 1 would zero everything
Probability = Annotated[float, at.Interval(ge=0, lt=1), "a probability in [0, 1)"]
#: a held-out share: both parts non-empty
Fraction = Annotated[float, at.Interval(gt=0, lt=1)]
#: a share where 0 means "none held out"
OptionalFraction = Annotated[float, at.Interval(ge=0, lt=1)]
#: numpy and Lightning accept seeds in [0, 2**32 - 1]
Seed = Annotated[int, at.Interval(ge=0, le=2**32 - 1), "an integer in [0, 4294967295]"]
MinMax = Annotated[Literal["min", "max"], "min or max"]
Interval, Ge, Gt, MinLen, MaxLen = at.Interval, at.Ge, at.Gt, at.MinLen, at.MaxLen
