"""The LR benchmark's helpers (benchmarks/lr_tasks.py, lr_grid.py): adapters, frozen heads, the grid curve."""

import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from lr_grid import curve, loss_at, lr_of, summary  # noqa: E402
from lr_tasks import TASKS, FrozenFeatures, add_lora  # noqa: E402


def test_lora_starts_at_the_base_model_and_trains_only_adapters() -> None:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    before = base(x)
    lora = add_lora(base, rank=2, alpha=4.0, skip=())
    assert torch.allclose(lora(x), before)  # B is zero
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable == {"0.A", "0.B", "2.A", "2.B"}


def test_frozen_features_keep_batchnorm_statistics() -> None:
    feats = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6))
    m = FrozenFeatures(feats, nn.Linear(6, 2)).train()
    stats = feats[1].running_mean.clone()
    m(torch.randn(16, 4) + 3)
    assert not feats.training and torch.equal(feats[1].running_mean, stats)
    assert [n for n, p in m.named_parameters() if p.requires_grad] == ["head.weight", "head.bias"]


def test_grid_curve_caps_diverged_runs_at_the_untrained_loss() -> None:
    runs = [{"k": k, "seed": s, "final_loss": v, "diverged": v is None, "seconds": 0.1}
            for k, vals in {-3: (2.0, 2.2), -2: (1.0, 1.2), -1: (1.5, 1.7), 0: (None, 9.0)}.items()
            for s, v in enumerate(vals)]
    entry = {"untrained_loss": 2.5, "seeds": 2, "runs": runs}
    ks, log_lrs, mean = curve(entry)
    assert ks.tolist() == [-3, -2, -1, 0] and np.allclose(mean, [2.1, 1.1, 1.6, 2.5])
    s = summary(entry)
    assert s["best_lr"] == lr_of(-2) and s["interior"] and s["top_diverged"]
    assert math.isclose(loss_at(10 ** -0.5, log_lrs, mean, 2.5), 1.35)
    assert loss_at(None, log_lrs, mean, 2.5) == 2.5 and loss_at(1e-9, log_lrs, mean, 2.5) == 2.1


def test_every_class_of_issue_11_is_covered() -> None:
    specs = TASKS.values()
    assert len(TASKS) >= 10
    assert {"adamw", "adam", "sgd-momentum", "sgd-nesterov", "rmsprop"} <= {s.optimizer for s in specs}
    assert {"ce", "ce-smooth", "bce"} <= {s.loss for s in specs} and {"mse", "huber"} & {s.loss for s in specs}
    assert {"mlp", "cnn-bn", "transformer-lm"} <= {s.arch for s in specs} and {"lstm", "gru"} & {s.arch for s in specs}
    assert {"scratch", "finetune", "lora", "head"} <= {s.regime for s in specs}
    assert len({s.batch for s in specs}) >= 3 and len({s.steps for s in specs}) >= 3
