"""Callbacks that make a user's own ``trainer.train()`` (Hugging Face) or ``trainer.fit()`` (Lightning) a tunekit trial.

Each reports the trial's evaluations to its study (through :meth:`OwnTrial.report`), at the optimizer
updates done so far, and stops training when tunekit's rungs prune the trial. They hold the trial,
never the model or the Trainer, so nothing of a finished trial outlives it; the final evaluation hands
the model's weights to the trial, which the search keeps when the trial is its best.

This module imports transformers or lightning (whichever callback is asked for): the user has them.
"""

from __future__ import annotations

# Imported where used, not at the top: lightning, pytorch_lightning, transformers;
# importing this module does not pay for them.
import math
from typing import Any, Optional

__all__ = ["hf_callback", "lightning_callback"]


def _metric_value(metrics: dict[str, Any], key: str) -> Optional[float]:
    value = metrics.get(key)
    if value is None:
        return None
    return float(value.item() if hasattr(value, "item") else value)


def hf_callback(trial: Any, metric: Optional[str] = None) -> Any:
    """A ``transformers.TrainerCallback`` reporting ``metrics["eval_<metric>"]`` (the trial's objective by
    default: its loss, or ``exp(eval_loss)`` for perplexity) after each evaluation."""
    from transformers import TrainerCallback

    objective = trial.objective if metric is None else metric

    class TunekitTrialCallback(TrainerCallback):  # type: ignore[misc]
        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Optional[dict[str, Any]] = None,
                        **kwargs: Any) -> None:
            metrics = metrics or {}
            if objective == "perplexity" and "eval_perplexity" not in metrics:
                loss = _metric_value(metrics, "eval_loss")
                value = math.exp(min(loss, 700.0)) if loss is not None else None
            else:
                value = _metric_value(metrics, f"eval_{objective}")
            if value is None:
                raise KeyError(f"the evaluation reported no eval_{objective} (it has {sorted(metrics)}): "
                               f"pass metric= one of them to trial.hf_callback()")
            if trial.report(state.global_step, value, model=kwargs.get("model")):
                control.should_training_stop = True

    return TunekitTrialCallback()


def lightning_callback(trial: Any, metric: str = "val_loss") -> Any:
    """A ``lightning.pytorch.Callback`` reporting ``trainer.callback_metrics[metric]`` after each validation
    (the sanity check's excepted)."""
    try:
        from lightning.pytorch import Callback
    except ImportError:  # the older package name
        from pytorch_lightning import Callback

    class TunekitTrialCallback(Callback):  # type: ignore[misc]
        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.sanity_checking:
                return
            value = _metric_value(dict(trainer.callback_metrics), metric)
            if value is None:
                raise KeyError(f"validation logged no {metric!r} (it logged {sorted(trainer.callback_metrics)}): "
                               "self.log it in validation_step, or pass metric= to trial.lightning_callback()")
            if trial.report(trainer.global_step, value, model=pl_module):
                trainer.should_stop = True

    return TunekitTrialCallback()
