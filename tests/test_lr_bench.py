"""The LR benchmark tasks' helpers (benchmarks/lr_tasks.py, which the corpus builds on): LoRA adapters and frozen heads."""

import torch
from torch import nn

from benchmarks.lr_tasks import FrozenFeatures, add_lora


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
