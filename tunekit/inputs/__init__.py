"""The front door: what every feature is given, checked once.

- :mod:`.task`: :class:`~tunekit.Task`, a model factory with its data, loss and optimizer;
- :mod:`.task_spec`: task specs (``shapes``, ``pkg.mod:fn``, ``file.py:fn``) and the built-in list;
- :mod:`.data`: datasets, loaders and lists of batches as one seeded stream;
- :mod:`.space`: search spaces (the shipped TOML files and the user's own);
- :mod:`.resolve`: a Task or the user's objects in hand, turned into what a probe runs on.
"""
