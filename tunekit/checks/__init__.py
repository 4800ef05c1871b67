"""``tunekit doctor``: find what makes a training run fail before any LR or batch is tuned.

Each check is a small function of its own that returns :class:`Finding` objects;
:func:`doctor` runs them all in stages on a model that comes back bitwise.
"""

from __future__ import annotations

from tunekit.checks.datachecks import check_constant_label, check_input_scale, check_leakage, check_shuffled
from tunekit.checks.gradients import check_gradient_flow
from tunekit.checks.loss import check_loss_contract
from tunekit.checks.modes import check_modes
from tunekit.checks.nonfinite import check_data_finite, check_nonfinite, check_scaler_skips
from tunekit.checks.overfit import check_overfit
from tunekit.checks.recipe import check_lr, check_memory, check_warmup
from tunekit.results import DoctorResult, Finding
from tunekit.checks.run import doctor

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
