"""One harness for every benchmark on the corpus (``benchmarks/corpus``).

- ``report``: a report that states its command, commit, machine and load, written under benchmarks/data/;
- ``grid``: ground-truth LR grids (full planned runs at 3 LRs a decade, several seeds), one JSON a task
  and length under ``benchmarks/data/corpus_grid/``, each with the command that made it;
- ``lofo``: leave-one-family-out selection: a rule chosen on the other families, scored on the one left out;
- ``costs``: what a method spent (samples, optimizer updates, busy device seconds), the two targets, the
  cost to reach a target, and anytime curves (best final loss after k full-trial equivalents).
"""
