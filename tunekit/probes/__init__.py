"""The probes: what a model and its data say before a sweep.

- :mod:`.range_test`: :func:`~tunekit.lr_find`, the LR range test refined by short runs;
  :mod:`.lr_rules`, the curve's rules (pure functions on arrays);
- :mod:`.batch_probe`: :func:`~tunekit.probe`, the largest, fastest and critical batch;
  :mod:`.memory_trace` (what one step allocates), :mod:`.noise_scale` (the gradient noise
  scale); :mod:`.refine_plan`, what lr_find's short runs may cost and how their best carries.

The peak as a function of the batch is :mod:`tunekit.results.memory_model`; the snapshot and
bitwise restore of what a probe touches, :mod:`tunekit.training.state`.

The pre-flight checks (:func:`~tunekit.doctor`) live in :mod:`tunekit.checks`.
"""
