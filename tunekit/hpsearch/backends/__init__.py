"""Where a search's trials run: :mod:`.local` (this process) or :mod:`.ray` (Ray Tune)."""
