"""Callbacks that show what a run learned (docs/inspect.md): confusion matrices, sample
predictions, Grad-CAM, embeddings, weight/gradient histograms and the model graph.
Each declares the data tasks it fits (`tasks`); `litlab.config.build` refuses the others."""
