"""Compressed client updates: communication is what costs in federated learning.

A client sends its *update* (local minus global weights), flattened into one vector: `int8`
quantizes each tensor's slice with its own scale (max |x| / 127), 4x fewer bytes than float32;
`topk` sends only the `topk_ratio` largest-magnitude entries (int32 index + float16 value),
with error feedback (Stich et al., 2018): what was not sent is kept in the client's Flower
context and added to its next update, so no part of an update is lost for good. The client
side is a Flower mod (outside any DP mod); the server decodes replies back into full weights
before the strategy aggregates them."""

import itertools

import numpy as np
from flwr.app import Array, ArrayRecord

KINDS = ("none", "int8", "topk")
RESIDUAL_KEY = "litlab-topk-residual"
_INT8 = ("int8.q", "int8.scale")
_TOPK = ("topk.index", "topk.value")


def flat(record: ArrayRecord) -> np.ndarray:
    """All arrays of a record as one float64 vector, in the record's key order."""
    return np.concatenate([record[k].numpy().astype(np.float64).ravel() for k in record])


def sizes(record: ArrayRecord) -> list[int]:
    return [int(np.prod(record[k].shape, dtype=np.int64)) for k in record]


def count_bytes(record: ArrayRecord) -> int:
    """Bytes of the serialized arrays (what a client sends up)."""
    return sum(len(record[k].data) for k in record)


def encode(
    update: np.ndarray, tensor_sizes: list[int], kind: str, topk_ratio: float = 0.1
) -> tuple[ArrayRecord, np.ndarray]:
    """(record to send, what was left out). `update` is the flat float update."""
    if kind == "int8":
        bounds = np.cumsum([0, *tensor_sizes])
        scale = np.array(
            [np.abs(update[a:b]).max(initial=0.0) / 127.0 for a, b in itertools.pairwise(bounds)],
            dtype=np.float32,
        )
        per_entry = np.repeat(np.where(scale > 0, scale, 1.0), tensor_sizes)
        q = np.clip(np.rint(update / per_entry), -127, 127).astype(np.int8)
        sent = ArrayRecord({_INT8[0]: Array(q), _INT8[1]: Array(scale)})
        return sent, update - q * per_entry
    if kind == "topk":
        k = max(1, round(topk_ratio * update.size))
        index = np.argpartition(np.abs(update), -k)[-k:].astype(np.int32)
        index.sort()
        value = update[index].astype(np.float16)  # its rounding error is fed back too
        rest = update.copy()
        rest[index] -= value.astype(np.float64)
        return ArrayRecord({_TOPK[0]: Array(index), _TOPK[1]: Array(value)}), rest
    raise ValueError(f"unknown compression {kind!r}")


def decode_update(sent: ArrayRecord, tensor_sizes: list[int]) -> np.ndarray | None:
    """The flat update a compressed record stands for; None when `sent` holds full weights."""
    keys = tuple(sent.keys())
    if keys == _INT8:
        q, scale = sent[_INT8[0]].numpy(), sent[_INT8[1]].numpy()
        return q.astype(np.float64) * np.repeat(scale.astype(np.float64), tensor_sizes)
    if keys == _TOPK:
        update = np.zeros(sum(tensor_sizes))
        update[sent[_TOPK[0]].numpy()] = sent[_TOPK[1]].numpy().astype(np.float64)
        return update
    return None


def decode_sent(sent: ArrayRecord, global_arrays: ArrayRecord) -> ArrayRecord:
    """Full client weights (global + update), in the dtypes and shapes of the global record."""
    update = decode_update(sent, sizes(global_arrays))
    if update is None:
        return sent
    weights, start = {}, 0
    for key in global_arrays:
        old = global_arrays[key].numpy()
        part = update[start : start + old.size].reshape(old.shape)
        weights[key] = Array(np.asarray(old + part, dtype=old.dtype))
        start += old.size
    return ArrayRecord(weights)


class CompressionMod:
    """Flower client mod: replaces the reply's weights by the compressed update."""

    def __init__(self, kind: str, topk_ratio: float = 0.1):
        self.kind, self.topk_ratio = kind, topk_ratio

    def __call__(self, msg, ctx, call_next):
        from flwr.app import MessageType

        if msg.metadata.message_type != MessageType.TRAIN:  # evaluation and queries send no update
            return call_next(msg, ctx)
        global_arrays = msg.content["arrays"]
        reply = call_next(msg, ctx)
        if reply.has_error():
            return reply
        update = flat(reply.content["arrays"]) - flat(global_arrays)
        feedback = self.kind == "topk"
        if feedback and RESIDUAL_KEY in ctx.state.array_records:
            update += ctx.state[RESIDUAL_KEY]["residual"].numpy()
        sent, left = encode(update, sizes(global_arrays), self.kind, self.topk_ratio)
        if feedback:
            ctx.state[RESIDUAL_KEY] = ArrayRecord({"residual": Array(left)})
        reply.content["arrays"] = sent
        return reply
