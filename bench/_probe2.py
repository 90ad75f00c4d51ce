import sys, tempfile, cProfile, pstats, shutil, warnings
from pathlib import Path
sys.argv = ["x"]
import graph
d = Path(tempfile.mkdtemp()); shutil.copytree("/work/shared/data/Planetoid", d / "Planetoid")
mode = sys.argv[0]
pr = cProfile.Profile(); n = [0]
orig = graph.HandWritten.epoch
def ep(self):
    n[0] += 1
    if n[0] > 3: pr.enable()
    r = orig(self)
    pr.disable(); return r
graph.HandWritten.epoch = ep
import os
if os.environ.get("M") == "t": graph.template_pairs("gcn_cora", d, 20, d / "run", bare=True)
else: graph.plain_lightning_pairs("gcn_cora", d, 20)
print("filters", len(warnings.filters))
pstats.Stats(pr).sort_stats("tottime").print_stats(12)
