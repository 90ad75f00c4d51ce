"""What every run shares, whatever its recipe: its run dir (made, locked, checked; `run_dir`),
its end (`run_end`: one shape for a run from the CLI and the API, and what the dir keeps when it
stops), its result (`result`), its predictions file (`predictions`), the DDP lifecycle of its
ranks (`ddp`, `ddp_join`, `ddp_peers`, `ddp_callback`), the first forward's shape check
(`first_forward`) and the checks of a sweep's jobs before the first starts (`sweep_check`,
`launcher_check`). The recipes (litlab.recipes: train, evaluate, ...) run on it."""
