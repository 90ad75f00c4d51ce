"""Make a trained model smaller: structured/unstructured pruning, knowledge distillation and
int8 quantization, each measured (parameters, size on disk, test metric, latency).

`python src/compress.py ckpt_path=PATH compress=prune|distill|quantize` (docs/compress.md);
the recipe is `litlab.compression.recipe.compress`.
"""
