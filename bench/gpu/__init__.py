"""The GPU training benchmark's parts; bench/gpu_train.py runs them (docs/benchmarks.md, "GPU training").

- config: the settings (flags, tiny defaults) and the variants;
- data: packer builds of the two corpora, documents read back, padded and packed batches;
- steps: the model (examples/train_gpt.py's), the training step, timing and figures;
- tasks: the run's state, and the train and loader tasks;
- correct: the correctness task (packed rows against every document alone);
- plan: the plans, and running them within the budget;
- report: what a run prints and writes.
"""
