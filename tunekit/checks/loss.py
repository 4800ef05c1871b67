"""Check 4, the loss contract: is the loss fed what it expects (logits, class ids in range), and
does it start where an untrained model should?"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import nn

from tunekit.inputs.data import Batch
from tunekit.inputs.task import LossComputer, class_layout, loss_problem
from tunekit.checks.common import forward, outputs_of, raised
from tunekit.results import Finding

__all__ = ["check_loss_contract", "loss_kind", "class_layout", "INIT_LOSS_FACTOR", "FAR_SCALE"]

CHECK = "loss"

# An untrained classifier's logits are near zero, so its cross-entropy is near ln(C). Twice that
# (and at least a nat more) means over-confident logits at the start: a too-large init or output
# scale, which costs the first part of the run to undo. Lower is not flagged: a model in hand may
# be pretrained.
INIT_LOSS_FACTOR = 2.0
INIT_LOSS_MARGIN = 1.0
# A value "far from standardised": mean or std of order 20 or more. Standardised data has |mean|
# and std near 1; data in natural units (pixels 0..255, prices, counts) is in the tens to thousands.
FAR_SCALE = 20.0
# Outputs lying in [0, 1] by chance (not from a sigmoid) become unlikely with this many values.
MIN_VALUES_FOR_RANGE = 32

_CE = (nn.CrossEntropyLoss,)
_BCE_LOGITS = (nn.BCEWithLogitsLoss,)
_NLL = (nn.NLLLoss,)
_REGRESSION = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss)
_BY_NAME = {"cross_entropy": "ce", "binary_cross_entropy_with_logits": "bce_logits", "nll_loss": "nll",
            "mse_loss": "regression", "l1_loss": "regression", "smooth_l1_loss": "regression", "huber_loss": "regression"}


def loss_kind(loss: Any) -> Optional[str]:
    """What a criterion expects, for the ones whose contract is known: ce, bce_logits, nll, regression."""
    for types, kind in ((_CE, "ce"), (_BCE_LOGITS, "bce_logits"), (_NLL, "nll"), (_REGRESSION, "regression")):
        if isinstance(loss, types):
            return kind
    return _BY_NAME.get(getattr(loss, "__name__", ""))


# The heads of Hugging Face models that compute cross-entropy themselves from integer labels: the
# language models always; the classifiers unless their config says regression or multi-label (and
# with one label, which transformers takes as regression).
_HF_LM_HEADS = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForTokenClassification")
_HF_CLASS_HEADS = ("ForSequenceClassification", "ForImageClassification")


def model_loss_kind(model: nn.Module, compute: LossComputer, y: torch.Tensor) -> Optional[str]:
    """"ce" where the loss is a Hugging Face model's own and that model computes cross-entropy from
    these integer labels (transformers' documented rule for its heads), else None."""
    config = getattr(model, "config", None)
    if compute.loss is not None or compute.compute_loss is not None or config is None or y.is_floating_point():
        return None
    name = type(model).__name__
    if name.endswith(_HF_LM_HEADS):
        return "ce"
    if name.endswith(_HF_CLASS_HEADS) and getattr(config, "num_labels", 2) > 1 and \
            getattr(config, "problem_type", None) in (None, "single_label_classification"):
        return "ce"
    return None


def _probabilities(out: torch.Tensor, dim: Optional[int]) -> bool:
    """Values in [0, 1] (that sum to 1 over ``dim`` when given): a softmax or sigmoid was applied."""
    if out.numel() < 2 or float(out.min()) < 0 or float(out.max()) > 1:
        return False
    if dim is None:
        return out.numel() >= MIN_VALUES_FOR_RANGE
    return bool(torch.allclose(out.sum(dim), torch.ones(()), atol=1e-3)) and out.shape[dim] > 1


def _classification(kind: Optional[str], out: torch.Tensor, y: torch.Tensor, loss: Any) -> list[Finding]:
    dim = class_layout(out, y)
    if dim is None:
        return []
    classes = int(out.shape[dim])
    found: list[Finding] = []
    known = kind in ("ce", "nll")
    if kind != "nll" and _probabilities(out, dim):
        found.append(Finding(CHECK, "fail" if known else "warn", f"the outputs already sum to 1 over {classes} classes "
                             "(a softmax) but the loss expects logits", {"classes": classes},
                             "drop the softmax from the model: cross-entropy applies log-softmax itself"))
    if kind == "nll" and float(out.max()) > 0:
        found.append(Finding(CHECK, "fail", f"NLLLoss expects log-probabilities (<= 0), the outputs reach {float(out.max()):.3g}",
                             {"max_output": float(out.max())}, "apply log_softmax before NLLLoss, or use CrossEntropyLoss on logits"))
    if y.is_floating_point():
        if known or bool((y == y.round()).all()):
            found.append(Finding(CHECK, "fail", f"float labels ({y.dtype}) where class indices are expected",
                                 {"dtype": str(y.dtype)}, "pass the labels as integers: targets.long()"))
        return found
    ignore = getattr(loss, "ignore_index", -100)
    valid = y[y != ignore]
    if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= classes):
        found.append(Finding(CHECK, "fail", f"labels range over {int(valid.min())}..{int(valid.max())} but the output "
                             f"has {classes} classes (0..{classes - 1})", {"min": int(valid.min()), "max": int(valid.max()),
                             "classes": classes}, "make the output layer as wide as the number of classes, or remap the labels"))
    return found


def _binary(out: torch.Tensor, y: torch.Tensor) -> list[Finding]:
    found: list[Finding] = []
    if _probabilities(out, None):
        found.append(Finding(CHECK, "fail", "the outputs all lie in [0, 1] (a sigmoid) but BCEWithLogitsLoss expects logits",
                             {"min": float(out.min()), "max": float(out.max())},
                             "drop the sigmoid from the model, or use BCELoss (less stable)"))
    if y.numel() and (float(y.min()) < 0 or float(y.max()) > 1):
        found.append(Finding(CHECK, "fail", f"binary targets range over {float(y.min()):.3g}..{float(y.max()):.3g}, outside [0, 1]",
                             {"min": float(y.min()), "max": float(y.max())}, "binary targets are 0/1 (or probabilities)"))
    return found


def _regression(out: torch.Tensor, y: torch.Tensor) -> list[Finding]:
    flat = y.detach().float().reshape(len(y), -1) if y.ndim else y.float().reshape(1, 1)
    scale = float(torch.maximum(flat.mean(0).abs(), flat.std(0) if len(flat) > 1 else flat.mean(0).abs()).max())
    if scale > FAR_SCALE:
        return [Finding(CHECK, "warn", f"regression targets far from standardised (|mean| or std up to {scale:.3g})",
                        {"target_scale": scale}, "standardise the targets (subtract the mean, divide by the std) and "
                        "undo it on the predictions")]
    return []


def _initial_loss(value: float, classes: int) -> list[Finding]:
    expected = math.log(classes)
    if value > INIT_LOSS_FACTOR * expected and value - expected > INIT_LOSS_MARGIN:
        return [Finding(CHECK, "warn", f"initial loss {value:.3g} is far above ln({classes}) = {expected:.3g}, "
                        "an untrained classifier's", {"initial_loss": value, "ln_classes": expected},
                        "the logits start too large: scale down the last layer's initialisation")]
    return []


def _fed(kind: Optional[str], out: torch.Tensor, y: torch.Tensor, loss: Any) -> list[Finding]:
    """What the loss (of ``kind``) is fed: probabilities or logits, label dtype and range, target scale."""
    if kind == "bce_logits":
        return _binary(out, y.float())
    if kind == "regression" or (kind is None and y.is_floating_point() and y.shape == out.shape):
        return _regression(out, y)
    if kind in ("ce", "nll") or (kind is None and class_layout(out, y) is not None):
        return _classification(kind, out, y, loss)
    return []


def _loss_of(model: nn.Module, compute: LossComputer, batch: Batch) -> tuple[Optional[torch.Tensor], list[Finding]]:
    """(the batch's loss, []) when it is one value to backpropagate, else (None, the failure that says why)."""
    try:
        with torch.no_grad():
            loss = forward(model, compute, batch).loss
    except Exception as exc:
        return None, [raised(CHECK, exc, "the loss")]
    problem = loss_problem(loss, compute)
    if problem is None:
        return loss, []
    shape = list(loss.shape) if isinstance(loss, torch.Tensor) else None
    return None, [Finding(CHECK, "fail", problem[0], {"type": type(loss).__name__, "shape": shape}, problem[1])]


def check_loss_contract(model: nn.Module, compute: LossComputer, batch: Batch) -> list[Finding]:
    """What the loss is fed (probabilities or logits, label dtype and range, target scale), whether it
    is one value to backpropagate, and the initial loss of a classifier against ln(C)."""
    try:
        with torch.no_grad():
            out, y = outputs_of(model, compute, batch)
    except Exception as exc:
        return [raised(CHECK, exc, "the forward")]
    if out is None or y is None:
        _, failed = _loss_of(model, compute, batch)
        return failed or [Finding(CHECK, "info", "the loss's inputs are not visible (a custom compute_loss, or no "
                                  "labels): not checked")]
    out, y = out.detach().float(), y.detach()
    kind = loss_kind(compute.loss) or model_loss_kind(model, compute, y)
    found = _fed(kind, out, y, compute.loss)
    if any(f.status == "fail" for f in found):
        return found  # the loss would raise, or mislead, for that reason: said once
    loss, failed = _loss_of(model, compute, batch)
    if loss is None:
        return found + failed
    dim = class_layout(out, y)
    if dim is not None and not y.is_floating_point() and kind != "nll":
        value = float(loss.float())
        if math.isfinite(value):
            found += _initial_loss(value, int(out.shape[dim]))
    return found or [Finding(CHECK, "pass", f"the loss is fed what it expects ({kind or 'inferred from the shapes'})")]
