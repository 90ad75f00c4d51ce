"""What every run shares, whatever its recipe (its modules: DEVELOPERS.md's layout). The
recipes (litlab.recipes, and the packages' own) run on it."""
