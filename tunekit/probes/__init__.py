"""The probes: what a model and its data say before a sweep.

- :mod:`.range_test`: :func:`~tunekit.lr_find`, the LR range test refined by short runs:
  :mod:`.sweep` (the sweep and its curve), :mod:`.refine` (the short runs), :mod:`.short_runs`
  (what they may cost and how their best carries), :mod:`.lr_rules` (the curve's rules, pure);
- :mod:`.batch_probe`: :func:`~tunekit.probe`, the largest, fastest and critical batch:
  :mod:`.probe_run` (what its stages share), :mod:`.memory_trace` (what one step allocates),
  :mod:`.largest_batch` (confirmed by real steps, :mod:`.clean_heap` measuring them on the CPU),
  :mod:`.throughput`, :mod:`.noise_scale` (the gradient noise scale).

The peak as a function of the batch is :mod:`tunekit.results.memory_model`; the snapshot and
bitwise restore of what a probe touches, :mod:`tunekit.training.state`.

The pre-flight checks (:func:`~tunekit.doctor`) live in :mod:`tunekit.checks`.
"""
