"""Make a trained model smaller: `python src/compress.py ckpt_path=PATH compress=prune`.

    python src/compress.py ckpt_path=PATH compress=prune compress.prune.ratio=0.1
    python src/compress.py ckpt_path=PATH compress=distill model@compress.distill.student=cnn
    python src/compress.py ckpt_path=PATH compress=[distill,quantize]
    python src/compress.py ckpt_path=last                # resume an interrupted fine-tuning

Writes logs/compress/runs/<timestamp>/: a checkpoint per step (eval.py loads it) and
compress_report.md/.json (parameters, size, test metric, latency). See docs/compress.md.
"""

from omegaconf import DictConfig

from litlab import cli


@cli.main("compress")
def main(cfg: DictConfig) -> None:
    from litlab.compression.recipe import compress

    compress(cfg)


if __name__ == "__main__":
    cli.run_main(main)
