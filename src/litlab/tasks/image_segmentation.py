"""2D images in, a label per pixel out (axial slices of the Hippocampus volumes, a user's
images/ + masks/ folders). The kind (`ImageSegmentation`), what its outputs are (`Masks`: class
scores per pixel, served as a label map) and its samples figure (`Overlays`)."""

from litlab.tasks import IMAGE_SEGMENTATION
from litlab.tasks.figures import SamplesFigure, mask_pairs
from litlab.tasks.kind import Kind, PixelClasses, register_kind
from litlab.tasks.tensors import ImageInputs
from litlab.tasks.units import dominant_structure


class Masks(PixelClasses):
    """Class scores per pixel (N, classes, H, W): probabilities by softmax over the classes,
    the label map by the most probable class. Federated partitions deal images out by their
    dominant foreground structure."""

    @staticmethod
    def metric_input(outputs):
        return outputs.argmax(1)

    @staticmethod
    def answer(names: list[str], probs) -> dict:
        return {"masks": probs.argmax(1).astype("uint8").tolist(), "classes": names}

    @staticmethod
    def at_image_sizes(answer: dict, sizes: list[tuple[int, int]], fit: str | None) -> dict:
        """Each label map at its image's size: the centred image cut back out of the padded
        canvas (`fit` "pad", as `serving.images` padded it), or resized back (nearest label)."""
        import numpy as np
        from PIL import Image

        masks = []
        for mask, (width, height) in zip(answer["masks"], sizes, strict=True):
            m = np.asarray(mask, np.uint8)
            if fit == "pad":
                top, left = (m.shape[0] - height) // 2, (m.shape[1] - width) // 2
                m = m[top : top + height, left : left + width]
            elif m.shape != (height, width):
                m = np.asarray(Image.fromarray(m).resize((width, height), Image.NEAREST))
            masks.append(m.tolist())
        return {**answer, "masks": masks}

    @staticmethod
    def png(answer: dict) -> bytes:
        """One image's label map as an 8-bit PNG (pixel value = class id); ValueError for
        another count (the service's 422)."""
        import io

        import numpy as np
        from PIL import Image

        if len(answer["masks"]) != 1:
            raise ValueError("Accept: image/png answers one image a request; send one.")
        buffer = io.BytesIO()
        Image.fromarray(np.asarray(answer["masks"][0], np.uint8)).save(buffer, format="PNG")
        return buffer.getvalue()

    @staticmethod
    def strata(train_labels, heldout_labels):
        import numpy as np

        def dominant(masks):
            return np.asarray([dominant_structure(m) for m in masks])

        return dominant(train_labels), dominant(heldout_labels)


class Overlays(SamplesFigure):
    """`callbacks=inspect`'s samples figure: the middle slice of the first test items, the
    image with its true and its predicted label map (at most 6 items: rows of two panels)."""

    def __init__(self, count: int = 6) -> None:
        super().__init__(min(count, 6))

    def collect(self, module, batch) -> None:
        if len(self.held) < self.count:
            x, y = batch
            middle = len(x) // 2
            pred = module(x[middle : middle + 1]).argmax(1)[0]
            self.held.append((x[middle, 0].float().cpu(), y[middle].cpu(), pred.cpu()))

    def draw(self, trainer):
        return mask_pairs([[t.numpy() for t in row] for row in self.held], "item")


@register_kind
class ImageSegmentation(ImageInputs, Masks, Kind):
    """PNG or JPEG uploads (or JSON images), zero-padded to the model's image size as its
    training images were; /predict answers one label map per image, at the image's size (an
    upload's; a JSON image is at the model's). The out-of-distribution score measures the
    images too, and the pixels' confidence."""

    name = IMAGE_SEGMENTATION
    # mean foreground Dice (the monitor) and each foreground class's, over whole items: the
    # slices of one volume, or one image of a mask folder (evaluation batches hold one item)
    metrics = ("dice", "dice_*")
    inspect = ("samples", "histograms", "model_graph")
    samples_figure = Overlays
    # judged by the test Dice over whole items, int8 within 2% of it
    quantize_max_drop = 0.02
    # per-pixel soft targets at T=1 (as 3D segmentation: the Dice term teaches small structures)
    distill_temperature = 1.0
    compress_epochs = 5
