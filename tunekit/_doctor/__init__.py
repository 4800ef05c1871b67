"""``tunekit doctor``: find what makes a training run fail before any LR or batch is tuned.

Each check is a small function of its own that returns :class:`Finding` objects;
:func:`doctor` runs them all in stages on a model that comes back bitwise.
"""

from __future__ import annotations

from .datachecks import check_constant_label, check_input_scale, check_leakage, check_shuffled
from .gradients import check_gradient_flow
from .loss import check_loss_contract
from .modes import check_modes
from .nonfinite import check_data_finite, check_nonfinite, check_scaler_skips
from .overfit import check_overfit
from .recipe import check_lr, check_memory, check_warmup
from ..results import DoctorResult, Finding
from .run import doctor

__all__ = [
    "doctor",
    "DoctorResult",
    "Finding",
    "check_gradient_flow",
    "check_overfit",
    "check_data_finite",
    "check_nonfinite",
    "check_scaler_skips",
    "check_loss_contract",
    "check_input_scale",
    "check_shuffled",
    "check_constant_label",
    "check_leakage",
    "check_modes",
    "check_lr",
    "check_warmup",
    "check_memory",
]
