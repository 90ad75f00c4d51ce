"""Callbacks that show what a run learned (docs/inspect.md): confusion matrices, sample
predictions, Grad-CAM, embeddings, weight/gradient histograms and the model graph.
Each declares its name (`inspects`); a task kind lists the ones that apply to it (`litlab.tasks`), and `litlab.config.build` refuses the others."""
