"""The probes: what a model and its data say before a sweep.

- :mod:`.range_test`: :func:`~tunekit.lr_find`, the LR range test refined by short runs;
  :mod:`.lr_rules`, the curve's rules (pure functions on arrays);
- :mod:`.batch_probe`: :func:`~tunekit.probe`, the largest, fastest and critical batch;
  :mod:`.memory_trace` (what one step allocates), :mod:`.memory_model` (the peak as a
  function of the batch), :mod:`.noise_scale` (the gradient noise scale);
- :mod:`.state`: snapshot and bitwise restore of what a probe touches.

The pre-flight checks (:func:`~tunekit.doctor`) live in :mod:`tunekit.checks`.
"""
