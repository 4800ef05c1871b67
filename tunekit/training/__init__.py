"""The one training step and what drives it; nothing else in tunekit trains.

- :mod:`.step`: :class:`~tunekit.TrainStep` (warmup + decay, accumulation, mixed precision, clipping);
- :mod:`.schedule`: the LR schedule as pure functions on arrays;
- :mod:`.loop`: :func:`~tunekit.train` and :func:`~tunekit.evaluate`, a run of the step.
"""
