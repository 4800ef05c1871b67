"""One study shared by many workers, on any machine.

- :mod:`.api`: create a study, join it as a worker, reap stopped workers, report it;
- :mod:`.workers`: the study's spec, worker ids and seeds, slots, stopped workers;
- :mod:`.server`: ``tunekit serve`` (Optuna's gRPC proxy), the dashboard, artifacts.
"""
