import sys, threading, torch, tempfile
from pathlib import Path
sys.argv = ["x"]
import graph
hand_t = []
orig = graph.HandWritten.epoch
def ep(self):
    r = orig(self); hand_t.append(r[0]); 
    if len(hand_t) in (5, 25, 45): print("threads", torch.get_num_threads(), torch.get_num_interop_threads(), threading.active_count(), [t.name for t in threading.enumerate()], torch.is_grad_enabled(), torch.are_deterministic_algorithms_enabled(), torch.get_default_dtype())
    return r
graph.HandWritten.epoch = ep
import shutil
d = Path(tempfile.mkdtemp()); shutil.copytree("/work/shared/data/Planetoid", d / "Planetoid")
graph.HandWritten("gcn_cora", d)
graph.plain_lightning_pairs("gcn_cora", d, 20)
graph.template_pairs("gcn_cora", d, 20, d / "run", bare=True)
import statistics
print("plain-paired hand", statistics.median(hand_t[2:20]), "template-paired hand", statistics.median(hand_t[22:40]))
