"""The one training step and what drives it; nothing else in tunekit trains.

- :mod:`.step`: :class:`~tunekit.TrainStep` (warmup + decay, accumulation, mixed precision, clipping);
- :mod:`.schedule`: the LR schedule as pure functions on arrays;
- :mod:`.loop`: :func:`~tunekit.train` and :func:`~tunekit.evaluate`, a run of the step.
- :mod:`.memory`: out of memory recognised and memory freed (the probe's and a search's one answer);
- :mod:`.optimizers`: the optimizer's family and an LR carried to another batch.
"""
