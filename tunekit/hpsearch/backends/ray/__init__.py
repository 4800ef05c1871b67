"""The Ray Tune backend of :func:`tunekit.search` (imported only with ``backend="ray"``)."""

from tunekit.hpsearch.backends.ray.backend import RayBackend, check_packing, fits, run_ray
from tunekit.hpsearch.backends.ray.cluster import check_address, ray_available

__all__ = ["RayBackend", "run_ray", "check_packing", "check_address", "ray_available", "fits"]
