"""Search-space files shipped with tunekit (installed as ``tunekit.search_spaces``)."""
