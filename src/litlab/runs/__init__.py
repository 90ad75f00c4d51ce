"""What every run shares, whatever its recipe: its run dir (made, locked, checked; `run_dir`),
its end (`run_end`: one shape for a run from the CLI and the API, what the dir keeps when it
stops, and `RunResult`), what it prints and records (`summary`: its predictions and
data_split.json too), the DDP lifecycle of its ranks (`ddp`, `ddp_join`), the first
forward's shape check (`first_forward`), tuning before fit (`tuning`), a trained run rebuilt
from its checkpoint (`rebuild`) and a sweep's folder and the checks of its jobs before the first
starts (`sweep_dir`). The recipes (litlab.recipes, and the packages' own) run on it."""
