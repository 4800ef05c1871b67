"""The Ray Tune backend of :func:`tunekit.search` (imported only with ``backend="ray"``)."""

from .backend import check_packing, fits, run_ray
from .cluster import check_address, ray_available

__all__ = ["run_ray", "check_packing", "check_address", "ray_available", "fits"]
