"""Federated learning on Flower: `python src/federate.py [group=option] [key=value]`.

    python src/federate.py                              # 10 clients, Dirichlet(0.5) digits
    python src/federate.py federate.partition=iid federate.compression=int8
    python src/federate.py federate/strategy=fedprox federate.strategy.proximal_mu=0.1
    python src/federate.py -m federate.alpha=0.1,0.5,1.0   # a sweep (multirun)

Each simulated client trains the configured LightningModule on its own partition; the server
aggregates with Flower's strategy and tests the global model after each round (docs/federated.md).
"""

from omegaconf import DictConfig

from litlab import cli


@cli.main("federate")
def main(cfg: DictConfig) -> float | None:
    from litlab.federated.federation import federate

    return federate(cfg).get(cfg.get("optimized_metric"))  # the objective of sweepers


if __name__ == "__main__":
    cli.run_main(main)
