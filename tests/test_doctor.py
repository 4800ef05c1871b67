"""tunekit doctor: each check alone on a fault and on a healthy model, then doctor() and the CLI."""

from __future__ import annotations

import ast
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import tunekit
from tunekit import DoctorChecks, PlannedRun, Refine, StepSettings, Sweep
from tunekit.checks import (
    DoctorResult, Finding, check_constant_label, check_data_finite, check_gradient_flow, check_input_scale,
    check_leakage, check_loss_contract, check_lr, check_memory, check_modes, check_nonfinite, check_overfit,
    check_scaler_skips, check_shuffled, check_warmup, doctor,
)
from tunekit.checks.datachecks import own_order
from tunekit.checks.overfit import loss_floor
from tunekit.training.step import TrainStep
from tunekit.inputs.task import LossComputer

from .tasks import MLP, HFStyleModel, classification_data, classification_task, dict_batches, regression_data

CE = LossComputer(nn.CrossEntropyLoss(), None)
CPU = torch.device("cpu")


def batch(n: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = classification_data(n, seed=seed).tensors
    return x, y


def statuses(found: list[Finding], check: str | None = None) -> list[str]:
    return [f.status for f in found if check is None or f.check == check]


def model(seed: int = 0, **kw: Any) -> MLP:
    torch.manual_seed(seed)
    return MLP(8, 16, 4, **kw)


# ------------------------------------------------------------------------------ 1. gradient flow

class Detached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc, self.head = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(x).detach())


class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.branch, self.head = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.where(torch.zeros_like(x, dtype=torch.bool), self.branch(x), x))


def test_gradient_flow_names_a_detached_layer() -> None:
    found = check_gradient_flow(Detached(), CE, batch())
    fail = [f for f in found if f.status == "fail"]
    assert len(fail) == 1 and "enc.weight" in fail[0].message and fail[0].evidence["no_grad"] == ["enc.weight", "enc.bias"]


def test_gradient_flow_names_an_all_zero_gradient() -> None:
    found = check_gradient_flow(Gated(), CE, batch())
    assert [f.evidence.get("zero_grad") for f in found if f.status == "fail"] == [["branch.weight", "branch.bias"]]


def test_gradient_flow_reports_frozen_as_information_and_passes_healthy() -> None:
    m = model()
    assert statuses(check_gradient_flow(m, CE, batch())) == ["pass"]
    m.net[0].weight.requires_grad_(False)
    found = check_gradient_flow(m, CE, batch())
    assert statuses(found) == ["info", "pass"] and found[0].evidence["frozen"] == ["net.0.weight"]


class ZeroInitResidual(nn.Module):
    """A residual branch whose last layer starts at zero (as zero_init_residual): healthy."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.fc1, self.fc2, self.head = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.inp(x))
        return self.head(h + self.fc2(F.relu(self.fc1(h))))


def test_gradient_flow_a_zero_initialised_layer_blocks_only_at_initialisation() -> None:
    torch.manual_seed(0)
    m = ZeroInitResidual()
    assert statuses(check_gradient_flow(m, CE, batch()), "gradients")[0] == "fail"  # without an optimizer: as seen
    opt = torch.optim.AdamW(m.parameters())
    before = [p.detach().clone() for p in m.parameters()]
    assert statuses(check_gradient_flow(m, CE, batch(), opt)) == ["pass"]
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters())) and not opt.state  # the update undone
    found = check_gradient_flow(Gated(), CE, batch(), torch.optim.AdamW(Gated().parameters()))
    assert statuses(found)[0] == "fail"


def test_gradient_flow_names_parameters_the_optimizer_does_not_hold() -> None:
    m = model()
    opt = torch.optim.AdamW(m.net[3].parameters())
    found = check_gradient_flow(m, CE, batch(), opt)
    assert [f.evidence.get("not_in_optimizer") for f in found if f.status == "fail"] == [["net.0.weight", "net.0.bias"]]
    assert statuses(check_gradient_flow(m, CE, batch(), torch.optim.AdamW(m.parameters()))) == ["pass"]


def test_gradient_flow_vanishing_and_exploding_layers() -> None:
    torch.manual_seed(0)
    deep = nn.Sequential(*[m for _ in range(16) for m in (nn.Linear(8, 8), nn.Sigmoid())], nn.Linear(8, 4))
    found = check_gradient_flow(deep, CE, batch())
    assert any(f.status == "warn" and "vanishing" in f.message and "0" in f.evidence["vanishing"] for f in found)
    assert len([f for f in found if f.status == "warn"]) == 1  # one decaying gradient: one finding
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    with torch.no_grad():
        m[0].weight.mul_(1e-6)  # a tiny weight with an ordinary gradient: steps huge for its size
        m[0].bias.zero_()
    found = check_gradient_flow(m, CE, batch())
    assert any(f.status == "warn" and f.evidence.get("exploding") == ["0"] for f in found)


def test_gradient_flow_ratios_are_in_the_evidence() -> None:
    found = check_gradient_flow(model(), CE, batch())
    assert set(found[-1].evidence["ratios"]) == {"net.0", "net.3"}


# ------------------------------------------------------------------------------ 2. overfit a tiny batch

class Bounded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = MLP(8, 16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.1 * torch.tanh(self.net(x))


def _overfit(m: nn.Module, compute: LossComputer = CE, floor: float = 0.0) -> Finding:
    x, y = batch(4)
    opt = torch.optim.AdamW(m.parameters())
    (found,) = check_overfit(m, opt, compute, (x, y), device=CPU, floor=floor)
    return found


def test_overfit_passes_a_healthy_model_and_fails_bounded_logits() -> None:
    ok = _overfit(model())
    assert ok.status == "pass" and ok.evidence["best"] <= ok.evidence["target"]
    bad = _overfit(Bounded())
    assert bad.status == "fail" and bad.evidence["best"] > 1.0 and len(bad.evidence["losses"]) == 300


def test_overfit_trains_through_the_shared_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunekit.checks import overfit

    calls = []

    class Counting(TrainStep):
        def __call__(self, *a: Any, **kw: Any) -> Any:
            calls.append(1)
            return super().__call__(*a, **kw)

    monkeypatch.setattr(overfit, "TrainStep", Counting)
    found = _overfit(model())
    assert len(calls) == found.evidence["steps"] > 0


def test_overfit_target_respects_the_label_smoothing_floor() -> None:
    loss = nn.CrossEntropyLoss(label_smoothing=0.2)
    x, y = batch(4)
    floor = loss_floor(loss, torch.zeros(4, 4), y)
    assert 0.5 < floor < 1.0  # the entropy of (0.85, 0.05, 0.05, 0.05)
    assert loss_floor(nn.CrossEntropyLoss(), torch.zeros(4, 4), y) == 0.0
    found = _overfit(model(), LossComputer(loss, None), floor)
    assert found.status == "pass"


# ------------------------------------------------------------------------------ 3. non-finite values

class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class SafeSqrt(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))


def test_nonfinite_names_the_first_module_in_forward() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), Log(), nn.Linear(16, 4))
    (found,) = check_nonfinite(m, CE, batch())
    assert found.status == "fail" and found.evidence == {"module": "1 (Log)", "phase": "forward"}


def test_nonfinite_names_the_module_where_the_gradient_turns_nan() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), SafeSqrt(), nn.Linear(16, 4))
    (found,) = check_nonfinite(m, CE, batch())
    assert found.status == "fail" and found.evidence["phase"] == "backward" and found.evidence["module"] == "3 (SafeSqrt)"


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_nonfinite_passes_healthy_also_in_anomaly_mode() -> None:
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 4))
    assert statuses(check_nonfinite(m, CE, batch())) == ["pass"]
    assert statuses(check_nonfinite(m, CE, batch(), anomaly=True)) == ["pass"]


def test_nonfinite_hooks_are_removed() -> None:
    from tunekit.checks.nonfinite import _Watch

    m = nn.Sequential(nn.Linear(8, 16), Log(), nn.Linear(16, 4))
    watch = _Watch(m)
    watch.close()
    m(batch()[0])
    assert watch.forward_first is None and watch.events == []


def test_nonfinite_data() -> None:
    x, y = batch()
    x = x.clone()
    x[3, 2] = math.inf
    found = check_data_finite([(x, y)])
    assert statuses(found) == ["fail"] and found[0].evidence == {"batch": 0, "where": "inputs", "count": 1}
    assert check_data_finite([batch()]) == []


def test_scaler_skips() -> None:
    assert statuses(check_scaler_skips(40, 100)) == ["warn"]
    assert statuses(check_scaler_skips(3, 100)) == ["info"]  # its calibration at the start
    assert statuses(check_scaler_skips(0, 100)) == ["pass"]


# ------------------------------------------------------------------------------ 4. loss contract

def test_loss_softmax_before_cross_entropy() -> None:
    m = nn.Sequential(model(), nn.Softmax(dim=1))
    found = check_loss_contract(m, CE, batch())
    assert statuses(found) == ["fail"] and "softmax" in found[0].message


def test_loss_sigmoid_before_bce_with_logits_and_binary_targets() -> None:
    x, y = batch(64)
    m = nn.Sequential(MLP(8, 16, 1), nn.Sigmoid())
    bce = LossComputer(nn.BCEWithLogitsLoss(), None)
    target = (y > 1).float().unsqueeze(1)
    found = check_loss_contract(m, bce, (x, target))
    assert statuses(found) == ["fail"] and "sigmoid" in found[0].message
    assert statuses(check_loss_contract(MLP(8, 16, 1), bce, (x, target))) == ["pass"]
    assert statuses(check_loss_contract(MLP(8, 16, 1), bce, (x, y.float().unsqueeze(1)))) == ["fail"]  # 0..3


def test_loss_labels_out_of_range_and_float_labels() -> None:
    x, y = batch()
    found = check_loss_contract(MLP(8, 16, 3), CE, (x, y))
    assert statuses(found) == ["fail"] and found[0].evidence["classes"] == 3 and found[0].evidence["max"] == 3
    found = check_loss_contract(model(), CE, (x, y.float()))
    assert statuses(found) == ["fail"] and "float labels" in found[0].message


def test_loss_initial_loss_far_from_ln_classes() -> None:
    m = model()
    with torch.no_grad():
        m.net[3].weight.mul_(50)
    found = check_loss_contract(m, CE, batch())
    assert statuses(found) == ["warn"] and found[0].evidence["ln_classes"] == pytest.approx(math.log(4))


def test_loss_regression_targets_far_from_standardised() -> None:
    x, y = regression_data(64).tensors
    mse = LossComputer(nn.MSELoss(), None)
    assert statuses(check_loss_contract(MLP(8, 16, 1), mse, (x, y * 1000))) == ["warn"]
    assert statuses(check_loss_contract(MLP(8, 16, 1), mse, (x, y))) == ["pass"]


def test_loss_healthy_known_inferred_and_dict_batches() -> None:
    assert statuses(check_loss_contract(model(), CE, batch())) == ["pass"]
    lm = LossComputer(lambda o, t: F.cross_entropy(o.flatten(0, 1), t.flatten()), None)  # class dim last, unknown fn
    seq = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 10))
    ids = torch.randint(0, 10, (4, 6))
    assert statuses(check_loss_contract(seq, lm, (ids, ids))) == ["pass"]
    assert statuses(check_loss_contract(HFStyleModel(), LossComputer(None, None), dict_batches(1)[0])) == ["pass"]
    custom = LossComputer(None, lambda m, b: m(b[0]).sum())
    assert statuses(check_loss_contract(model(), custom, batch())) == ["info"]


def test_loss_nll_fed_probabilities() -> None:
    m = nn.Sequential(model(), nn.Softmax(dim=1))
    assert statuses(check_loss_contract(m, LossComputer(nn.NLLLoss(), None), batch())) == ["fail"]
    ok = nn.Sequential(model(), nn.LogSoftmax(dim=1))
    assert statuses(check_loss_contract(ok, LossComputer(nn.NLLLoss(), None), batch())) == ["pass"]


# ------------------------------------------------------------------------------ 5. data

def test_input_scale() -> None:
    x, y = batch(64)
    assert statuses(check_input_scale([(x, y)])) == ["pass"]
    found = check_input_scale([(x * 60 + 128, y)])
    assert statuses(found) == ["warn"] and found[0].evidence["input_scale"] > 100
    assert statuses(check_input_scale([(torch.randint(0, 9, (4, 5)), y[:4])])) == ["info"]  # token ids


def test_shuffled() -> None:
    x, y = classification_data(512).tensors
    order = torch.argsort(y, stable=True)
    sorted_loader = DataLoader(TensorDataset(x[order], y[order]), batch_size=32, shuffle=False)
    found = check_shuffled(own_order(sorted_loader, 16))
    assert statuses(found) == ["fail"] and found[0].evidence["mean_run"] > 50
    shuffled = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
    assert statuses(check_shuffled(own_order(shuffled, 16))) == ["pass"]
    assert statuses(check_shuffled(own_order(TensorDataset(x, y), 16))) == ["pass"]  # a Dataset is reshuffled


def test_constant_label() -> None:
    x, y = batch(64)
    found = check_constant_label([(x, torch.zeros_like(y))])
    assert statuses(found) == ["fail"] and found[0].evidence["label"] == 0
    assert statuses(check_constant_label([(x, y)])) == ["pass"]


def test_leakage() -> None:
    train = classification_data(256)
    x, y = train.tensors
    found = check_leakage(train, TensorDataset(x[:20].clone(), y[:20].clone()), 32)
    assert statuses(found) == ["fail"] and found[0].evidence["duplicates"] == 20
    assert statuses(check_leakage(train, classification_data(64, seed=1), 32)) == ["pass"]
    assert statuses(check_leakage(train, None, 32)) == ["info"]
    assert statuses(check_leakage(dict_batches(4), dict_batches(2), None)) == ["fail"]  # same seed: the same samples


# ------------------------------------------------------------------------------ 6. modes

class NoRescaleDropout(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (torch.rand_like(x) > 0.5) if self.training else x


def test_modes_passes_a_model_without_mode_dependence() -> None:
    assert statuses(check_modes(model(), CE, batch())) == ["pass"]


def test_modes_dropout_and_batchnorm_are_information() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))
    before = [b.clone() for b in m.buffers()]
    found = check_modes(m, CE, batch())
    assert statuses(found) == ["info"] and found[0].evidence["modules"] == ["1 (BatchNorm1d)", "3 (Dropout)"]
    assert all(torch.equal(a, b) for a, b in zip(before, m.buffers()))  # running stats put back


def test_modes_warns_on_a_custom_mode_dependent_module() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), NoRescaleDropout(), nn.Linear(16, 4))
    found = check_modes(m, CE, batch())
    assert statuses(found) == ["warn"] and found[0].evidence["modules"] == ["1 (NoRescaleDropout)"]


# ------------------------------------------------------------------------------ 7. recipe

def test_lr_against_the_range_test() -> None:
    assert statuses(check_lr(1e-3, 3e-3, True)) == ["pass"]
    found = check_lr(1.0, 3e-3, True)
    assert found[0].fix.startswith("try lr=0.003")  # the API's terms; the CLI says --lr (test below)
    assert statuses(found) == ["warn"] and "above" in found[0].message
    assert "below" in check_lr(1e-6, 3e-3, True)[0].message
    assert statuses(check_lr(None, 3e-3, True)) == ["info"]
    assert statuses(check_lr(1.0, 3e-3, False)) == ["info"]  # an unconfident suggestion is no yardstick


def test_the_lr_line_claims_no_range_test_it_did_not_run_and_speaks_the_api() -> None:
    """No LR given and no saved lr_find: nothing was compared, so no "suggestion is none"; the advice names the
    keywords (``lr=``, ``lr_find_result=``), which the CLI says as its flags (``--lr``, ``--lr-find``)."""
    from tunekit.cli_commands import in_cli_terms

    (none,) = check_lr(None, None, False)
    assert none.status == "info" and "no range test ran" in none.message and "suggestion is" not in none.message
    assert "lr=..." in none.message and 'lr_find_result="lr_find.json"' in none.message
    (ok,) = check_lr(1e-3, 3e-3, True)
    assert 'lr_find_result="lr_find.json"' in ok.message and "--" not in ok.message and "tunekit lr-find" not in ok.message
    usage = "usage: tunekit doctor [--lr LR] [--lr-find FILE]"
    assert "--lr-find lr_find.json" in in_cli_terms(ok.message, usage)
    assert "--lr ..." in in_cli_terms(none.message, usage) and "--lr-find lr_find.json" in in_cli_terms(none.message, usage)
    (far,) = check_lr(1.0, 3e-3, True, lr_finds=lambda: 1e-3)  # lr_find's answer, not the curve's
    assert far.fix.startswith("try lr=0.001 (lr_find's suggestion, moved from the curve's 0.003 for your run)")
    assert far.evidence["lr_find"] == 1e-3


def test_a_doctor_given_no_lr_runs_no_range_test_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import tunekit.checks.run as run_mod

    monkeypatch.setattr(run_mod, "lr_find", lambda *a, **k: pytest.fail("no LR given: no range test runs"))
    model = MLP(8, 16, 4)
    r = tunekit.doctor(model, classification_data(64), nn.CrossEntropyLoss(),
                       step=StepSettings(batch_size=16, device="cpu"), progress=False)
    (line,) = [f for f in r.by_check("recipe") if "LR" in f.message]
    assert "no range test ran" in line.message and "suggestion is none" not in line.message


def test_warmup_share_of_the_run() -> None:
    assert statuses(check_warmup(0.3, 1000)) == ["warn"]
    assert statuses(check_warmup(300, 1000)) == ["warn"]
    assert statuses(check_warmup(50, 1000)) == ["pass"]
    assert statuses(check_warmup(0.05, None)) == ["pass"]
    assert statuses(check_warmup(50, None)) == ["info"]
    assert check_warmup(None, 1000) == []


def test_memory_headroom() -> None:
    m = MLP(8, 1024, 4)
    opt = torch.optim.AdamW(m.parameters())
    x, y = batch(8)
    small = [(x[:4], y[:4]), (x, y)]

    def make_step(mod: nn.Module, o: Any) -> TrainStep:
        return TrainStep(mod, o, CE, device=CPU)

    assert statuses(check_memory(m, opt, make_step, small, 64, 2**30, "test", CPU)) == ["pass"]
    found = check_memory(m, opt, make_step, small, 4096, 2**22, "test", CPU)
    assert statuses(found) == ["fail"] and found[0].evidence["peak_bytes"] > 2**22
    peak = found[0].evidence["peak_bytes"]
    assert statuses(check_memory(m, opt, make_step, small, 4096, int(peak / 0.9), "test", CPU)) == ["warn"]


# ------------------------------------------------------------------------------ doctor()

def _state(m: nn.Module, opt: torch.optim.Optimizer, scaler: Any = None) -> dict[str, Any]:
    return {
        "params": [p.detach().clone() for p in m.parameters()],
        "grads": [None if p.grad is None else p.grad.clone() for p in m.parameters()],
        "buffers": [b.clone() for b in m.buffers()],
        "modes": [mod.training for mod in m.modules()],
        "opt": opt.state_dict(),
        "lrs": [g["lr"] for g in opt.param_groups],
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": np.random.get_state()[1].copy(),
        "python_rng": random.getstate(),
        "scaler": None if scaler is None else scaler.state_dict(),
    }


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in ("params", "buffers"):
        assert all(torch.equal(x, y) for x, y in zip(a[key], b[key])), key
    assert all((x is None and y is None) or torch.equal(x, y) for x, y in zip(a["grads"], b["grads"]))
    assert a["modes"] == b["modes"] and a["lrs"] == b["lrs"]
    for i, st in a["opt"]["state"].items():
        for k, v in st.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(b["opt"]["state"][i][k])), (i, k)
    assert torch.equal(a["torch_rng"], b["torch_rng"])
    assert np.array_equal(a["numpy_rng"], b["numpy_rng"]) and a["python_rng"] == b["python_rng"]
    assert a["scaler"] == b["scaler"]


def _trained() -> tuple[nn.Module, torch.optim.Optimizer]:
    """A model with BatchNorm and dropout, a stepped optimizer (state to restore) and live gradients."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 4))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = batch(32)
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        opt.step()
    m.eval()
    m[3].train()  # a mixed train/eval state, to come back as it was
    return m, opt


def test_doctor_restores_model_optimizer_and_rngs_bitwise() -> None:
    m, opt = _trained()
    before = _state(m, opt)
    result = doctor(m, classification_data(256), nn.CrossEntropyLoss(), opt, classification_data(64, seed=1),
                    step=StepSettings(batch_size=32), run=PlannedRun(lr=1e-3))
    _assert_same(before, _state(m, opt))
    assert not result.failed, result.table()


class RaisesOnCall(nn.Module):
    """Works for ``ok_calls`` forwards, then raises: an error in the middle of a check."""

    def __init__(self, ok_calls: int) -> None:
        super().__init__()
        self.net = MLP(8, 16, 4)
        self.calls, self.ok_calls = 0, ok_calls

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.ok_calls:
            raise RuntimeError("boom in forward")
        return self.net(x)


@pytest.mark.parametrize("ok_calls", [0, 3, 12])
def test_a_model_that_raises_is_a_failure_finding_and_is_restored(ok_calls: int) -> None:
    torch.manual_seed(0)
    m = RaisesOnCall(ok_calls)
    opt = torch.optim.AdamW(m.parameters())
    before = _state(m, opt)
    result = doctor(m, classification_data(128), nn.CrossEntropyLoss(), opt, step=StepSettings(batch_size=32))
    _assert_same(before, _state(m, opt))
    fails = [f for f in result.items() if f.status == "fail"]
    assert fails and all("RuntimeError: boom in forward" in f.message for f in fails)
    assert result.exit_code == 1


def test_a_batch_tunekit_cannot_read_is_a_usage_error() -> None:
    m = HFStyleModel()
    opt = torch.optim.AdamW(m.parameters())
    unlabelled = [{"input_values": torch.randn(4, 8)}]
    before = _state(m, opt)
    with pytest.raises(tunekit.UsageError, match="needs a model that returns .loss"):
        doctor(m, unlabelled, optimizer=opt)
    _assert_same(before, _state(m, opt))
    with pytest.raises(tunekit.UsageError, match="lr must be a positive number"):
        doctor(classification_task(), run=PlannedRun(lr=-1.0))
    with pytest.raises(tunekit.UsageError, match="warmup"):
        doctor(classification_task(), run=PlannedRun(warmup=1.5))


def test_doctor_on_tasks_and_dict_batches() -> None:
    result = doctor(classification_task(), run=PlannedRun(lr=0.1))
    assert not result.failed and result.count("warn") == 0, result.table()
    assert result.grad_norms and result.overfit_losses and result.overfit_target is not None
    hf = doctor(HFStyleModel(), dict_batches(8), val_data=dict_batches(2, seed=1))
    assert not hf.failed and hf.count("warn") == 0, hf.table()


def test_result_json_round_trip_table_and_plot(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    result = doctor(nn.Sequential(model(), nn.Softmax(dim=1)), classification_data(128), nn.CrossEntropyLoss(),
                    step=StepSettings(batch_size=32))
    result.to_json(tmp_path / "doctor.json")
    back = DoctorResult.from_json(tmp_path / "doctor.json")
    assert back.findings == json.loads(result.to_json())["findings"] and back.failed
    text = back.table()
    assert text.splitlines()[0].startswith("[FAIL] loss") and "softmax" in text and "FAILED" in text.splitlines()[-1]
    assert "fail=" in repr(back) and len(repr(back)) < 120
    assert back.plot().get_title() == "gradient flow"
    fig = back.plot_overview()
    assert len(fig.axes) == 2 and fig.axes[0].get_title() == "gradient flow"
    assert back._repr_png_()[:4] == b"\x89PNG"


def test_result_module_imports_no_torch() -> None:
    root = Path(tunekit.__file__).parent
    for path in [*(root / "results").glob("*.py"), root / "plotting.py", root / "precision.py"]:
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not any(n == "torch" or n.startswith("torch.") for n in names), path


# ------------------------------------------------------------------------------ the CLI

# What the doctor may spend on a built-in task: forward calls of the model, the samples through them and
# optimizer updates (shapes: 146 calls, 6,536 samples, 137 updates; charlm: 160, 3,340, 151 when written).
# A deterministic bound in place of a wall time: its quick range test, overfit and checks, not a training run.
DOCTOR_WORK = {"forward": 250, "samples": 10_000, "updates": 250}


@pytest.fixture
def doctor_work(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Counts what the built-in tasks' models do in this process: forward calls, samples, optimizer updates."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from tunekit.builtin.charlm import CharTransformer
    from tunekit.builtin.shapes import ShapesCNN

    counts = {"forward": 0, "samples": 0, "updates": 0}
    for cls in (CharTransformer, ShapesCNN):
        def forward(self, x, *args, _forward=cls.forward, **kwargs):  # type: ignore[no-untyped-def]
            counts["forward"] += 1
            counts["samples"] += int(x.shape[0])
            return _forward(self, x, *args, **kwargs)

        monkeypatch.setattr(cls, "forward", forward)

    def step(*_: object) -> None:
        counts["updates"] += 1

    handle = register_optimizer_step_post_hook(step)
    yield counts
    handle.remove()


@pytest.mark.parametrize("task", ["shapes", pytest.param("charlm", marks=pytest.mark.slow)])
def test_cli_doctor_healthy_task_exits_0_writes_files_and_stays_within_its_work(task: str, tmp_path: Path, run_main,  # type: ignore[no-untyped-def]
                                                                               doctor_work: dict[str, int]) -> None:
    code, out, err = run_main("doctor", "--task", task, "--out", str(tmp_path), "--quiet")
    assert code == 0, out + err
    assert f"doctor {task}: ok" in out and "[PASS] overfit" in out
    data = json.loads((tmp_path / "doctor.json").read_text())
    assert data["task"] == task and data["grad_norms"] and data["overfit_losses"]
    assert (tmp_path / "doctor.png").stat().st_size > 1000
    # It trained (the counter sees the doctor's work) and no more than its budget.
    assert doctor_work["updates"] >= len(data["overfit_losses"]) > 0 and doctor_work["forward"] > 0
    assert all(doctor_work[k] <= DOCTOR_WORK[k] for k in DOCTOR_WORK), doctor_work


def test_cli_doctor_says_its_fixes_as_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    main(["doctor", "--lr", "5", "--warmup", "300", "--out", str(tmp_path), "--quiet"])
    out = capsys.readouterr().out
    assert "-> try --lr 0.0" in out and "e.g. --warmup 0.05" in out and "lr=" not in out


def test_cli_doctor_failing_task_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    code = main(["doctor", "--task", "tests.tasks:softmax_task", "--out", str(tmp_path), "--quiet"])
    out = capsys.readouterr().out
    assert code == 1 and "[FAIL] loss" in out and "softmax" in out
    assert (tmp_path / "doctor.json").exists()


@pytest.mark.parametrize("args, needle", [
    (["--run-steps", "0"], "--run-steps must be a positive integer, got 0"),
    (["--memory-budget", "lots"], "lots"),
    (["--warmup", "1.5"], "warmup 1.5"),
    (["--task", "nope"], "unknown task 'nope'"),
])
def test_cli_doctor_usage_errors_exit_2(args: list[str], needle: str, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    assert_usage_error(["doctor", "--out", "o", "--quiet", *args], needle)


@pytest.mark.slow  # a subprocess: the console entry point of `tunekit doctor`, end to end
def test_cli_doctor_subprocess_on_the_default_task(tmp_path: Path) -> None:
    from .tasks import run_cli

    r = run_cli("doctor", "--out", str(tmp_path), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "doctor shapes: ok" in r.stdout and (tmp_path / "doctor.json").is_file()


def test_an_unshuffled_loader_is_not_also_a_constant_label() -> None:
    from tunekit.checks.run import drawn_batches

    x, y = classification_data(2048).tensors
    order = torch.argsort(y, stable=True)
    loader = DataLoader(TensorDataset(x[order], y[order]), batch_size=32, shuffle=False)
    assert statuses(check_constant_label(drawn_batches(loader, None, 0))) == ["pass"]
    result = doctor(MLP(8, 16, 4), loader, nn.CrossEntropyLoss())
    assert [(f.check, f.status) for f in result.items() if f.status == "fail"] == [("data", "fail")]
    assert any("not shuffled" in f.message for f in result.by_check("data"))


def test_a_loss_with_a_floor_of_its_own() -> None:
    """A loss with a constant term that does not vanish fails the overfit unless its floor is given."""
    compute = lambda m, b: F.cross_entropy(m(b[0]), b[1]) + 1.0  # noqa: E731
    data = classification_data(128)
    bad = doctor(model(), data, compute_loss=compute, step=StepSettings(batch_size=32))
    assert [f.status for f in bad.by_check("overfit")] == ["fail"]
    ok = doctor(model(), data, compute_loss=compute, step=StepSettings(batch_size=32),
                checks=DoctorChecks(overfit_floor=1.0))
    assert [f.status for f in ok.by_check("overfit")] == ["pass"]
    with pytest.raises(tunekit.UsageError, match="overfit_floor"):
        doctor(model(), data, compute_loss=compute, step=StepSettings(batch_size=32),
               checks=DoctorChecks(overfit_floor=-1))


def test_fp16_reports_the_scalers_skips() -> None:
    result = doctor(classification_task(), step=StepSettings(precision="fp16"))
    (skips,) = [f for f in result.items() if "GradScaler" in f.message]
    assert skips.check == "nonfinite" and skips.status in ("pass", "info") and skips.evidence["steps"] > 0
    assert not result.failed, result.table()


def test_the_doctor_compares_the_lr_with_a_saved_lr_find_result_and_names_its_source(tmp_path) -> None:
    """One LR across tools: given a saved lr_find result, the doctor compares the intended LR with its
    suggestion, not with its own quick range test, and each finding says whose number it is."""
    from tunekit import doctor, lr_find

    task = classification_task()
    saved = lr_find(task, step=StepSettings(device="cpu"), sweep=Sweep(sweep_steps=60), refine=Refine(enabled=False))
    saved.suggestion, saved.confident = 1e-5, True  # far from anything the quick test would say
    saved.to_json(tmp_path / "lr_find.json")
    r = doctor(task, run=PlannedRun(lr=3e-2), step=StepSettings(device="cpu"),
               checks=DoctorChecks(lr_find_result=tmp_path / "lr_find.json"))
    f = next(f for f in r.findings if f["check"] == "recipe" and "lr 0.03" in f["message"])
    assert f["status"] == "warn" and "the saved lr_find result's suggestion 1e-05" in f["message"]
    quick = doctor(task, run=PlannedRun(lr=3e-2), step=StepSettings(device="cpu"))
    g = next(f for f in quick.findings if f["check"] == "recipe" and "lr 0.03" in f["message"])
    assert "the quick range test's (the curve alone, no short runs)" in g["message"]
    with pytest.raises(tunekit.UsageError, match="the saved lr_find file .* does not exist"):
        doctor(task, run=PlannedRun(lr=3e-2), step=StepSettings(device="cpu"),
               checks=DoctorChecks(lr_find_result=tmp_path / "missing.json"))


def test_the_doctor_refuses_a_saved_lr_find_of_another_precision(tmp_path) -> None:
    from tunekit import doctor, lr_find

    task = classification_task()
    lr_find(task, step=StepSettings(device="cpu"), sweep=Sweep(sweep_steps=40),
            refine=Refine(enabled=False)).to_json(tmp_path / "lr_find.json")
    with pytest.raises(tunekit.UsageError, match="the saved lr_find result is for precision 'fp32'"):
        doctor(task, run=PlannedRun(lr=3e-2), step=StepSettings(device="cpu", precision="bf16"),
               checks=DoctorChecks(lr_find_result=tmp_path / "lr_find.json"))
