"""Every setting of `src/serve.py` in one place, with its type and bounds (pydantic): checked
before the model is loaded, a bad value is one line naming the setting and what is valid.

The defaults are safe for a service exposed to untrusted clients; docs/deploy.md explains each.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from litlab.errors import UserError

KiB, MiB = 1 << 10, 1 << 20


class ServeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    workers: Annotated[int, Field(ge=1, le=256)] = 1
    threads: Annotated[int, Field(ge=1, le=256)] = 1
    max_batch: Annotated[int, Field(ge=1, le=4096)] = 64
    batching: bool = True
    max_wait_ms: Annotated[float, Field(ge=0, le=1000)] = 1.0
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "warning"
    # request bodies
    max_body_bytes: Annotated[int, Field(ge=KiB, le=1 << 30)] = 8 * MiB
    max_json_bytes: Annotated[int, Field(ge=KiB, le=256 * MiB)] = 2 * MiB
    max_json_depth: Annotated[int, Field(ge=2, le=64)] = 8
    # images: pixels from the header, checked before decoding
    max_image_pixels: Annotated[int, Field(ge=1, le=1 << 28)] = 4096 * 4096
    max_request_pixels: Annotated[int, Field(ge=1, le=1 << 30)] = 64 * MiB
    decode_threads: Annotated[int, Field(ge=1, le=64)] = 2
    # NIfTI volumes: voxels (x channels) from the header, checked before reading
    max_volume_voxels: Annotated[int, Field(ge=1, le=1 << 31)] = 1 << 25
    # connections
    max_header_bytes: Annotated[int, Field(ge=KiB, le=MiB)] = 16 * KiB
    keep_alive_s: Annotated[float, Field(gt=0, le=3600)] = 5.0
    request_read_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 15.0
    max_connections: Annotated[int, Field(ge=1, le=100_000)] = 1000
    max_request_s: Annotated[float, Field(gt=0, le=3600)] = 60.0
    retry_after_s: Annotated[int, Field(ge=0, le=3600)] = 1
    drain_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0


FIELDS = tuple(ServeSettings.model_fields)


def from_config(cfg) -> ServeSettings:
    """The serve settings of a composed config (keys of configs/serve.yaml), or one line."""
    values = {k: cfg[k] for k in FIELDS if k in cfg}
    try:
        return ServeSettings(**values)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{key}={values.get(key)!r}: {first['msg']}") from None
