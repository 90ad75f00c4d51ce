"""Output families: what a net's output columns are, for the layers after training. The kinds
of one output type share one family (`TaskKind.outputs`); a kind whose output is new writes its
own family in its module (litlab.tasks.regression.Values) and no other layer changes.

A family answers four questions, each asked by one layer:
- `names(model, datamodule)`: what each output column is called (export's metadata, under
  `names_key`; the service checks the model's output width against them);
- `metric_input(outputs)`: what the kind's torchmetrics take from one batch's outputs (export
  and compression recompute the test metric through an exported file);
- `prepare(outputs)`: a served batch's outputs as the answer reads them (the micro-batcher
  prepares a whole batch at once), and `answer(names, prepared)`: one request's JSON fields;
- `confidence`: whether the prepared outputs are class probabilities, which the out-of-
  distribution score reads (litlab.export.ood); a family without them exports no such score;
- `strata(train_labels, heldout_labels)`: the classes federated partitions deal items out by;
- `output_rank(layout)`: the rank of the output an exported file must answer, and its words;
- `at_image_sizes(answer, sizes, fit)`: an answer about uploaded images at each image's own
  size (label maps: the padding the model's size added cropped off again).

numpy and torch are imported by the methods that use them: a kind's declarations stay light.
"""


class OutputFamily:
    """What every family answers the same unless it says otherwise."""

    confidence = False

    @staticmethod
    def strata(train_labels, heldout_labels):
        return train_labels, heldout_labels

    @staticmethod
    def png(answer: dict) -> bytes | None:
        """The answer as a PNG (`Accept: image/png`): None, only label maps have one."""
        return None

    @staticmethod
    def at_image_sizes(answer: dict, sizes: list[tuple[int, int]], fit: str | None) -> dict:
        """The answer for uploaded images of `sizes` ((width, height) each), fitted to the
        model's size by `fit` ("pad" or a resize): one value per image needs nothing."""
        return answer


class Classes(OutputFamily):
    """Class scores out (per sample, per node, per graph): probabilities by softmax, the most
    probable class by name."""

    names_key = "classes"
    confidence = True

    @staticmethod
    def names(model, datamodule) -> list[str]:
        names = getattr(datamodule, "class_names", None)
        n = model.num_classes
        return [str(c) for c in names] if names else [str(i) for i in range(n)]

    @staticmethod
    def metric_input(outputs):
        return outputs.softmax(1)

    @staticmethod
    def output_rank(layout: dict) -> tuple[int, str]:
        return 2, "class scores (items x classes)"

    @staticmethod
    def prepare(outputs):
        """Row-wise softmax in float64; a row with inf or NaN becomes NaN (the service's
        finiteness check names it), silently."""
        import numpy as np

        logits = outputs.astype(np.float64)
        with np.errstate(all="ignore"):
            z = np.exp(logits - logits.max(axis=1, keepdims=True))
            return z / z.sum(axis=1, keepdims=True)

    @staticmethod
    def answer(names: list[str], probs) -> dict:
        import numpy as np

        ids = probs.argmax(1)
        return {
            "predictions": [names[i] for i in ids],
            "class_ids": ids.tolist(),
            "probabilities": np.round(probs, 6).tolist(),
            "classes": names,
        }


class PixelClasses(Classes):
    """Class scores per pixel or voxel (N, classes, *spatial): an output of the input's rank."""

    @staticmethod
    def output_rank(layout: dict) -> tuple[int, str]:
        return len(layout["x"]["shape"]), "a mask's class scores"
