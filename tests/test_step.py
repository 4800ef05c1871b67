import math

import pytest
import torch
from torch import nn

import tunekit
from tunekit import Measurement, StepSettings, Sweep, Task, TrainStep, train
from tunekit.training.step import make_scaler
from tunekit.inputs.task import LossComputer

from .tasks import MLP, classification_task, regression_data, regression_task

CPU = torch.device("cpu")


def _step(model: nn.Module, opt: torch.optim.Optimizer, k: int, **kw: object) -> TrainStep:
    return TrainStep(model, opt, LossComputer(nn.MSELoss(), None), device=CPU, accumulation_steps=k, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
@pytest.mark.parametrize("k", [2, 4])
def test_accumulation_equals_one_big_batch(opt_name: str, k: int) -> None:
    x, y = regression_data(64).tensors
    torch.manual_seed(0)
    a = MLP()
    b = MLP()
    b.load_state_dict(a.state_dict())

    def make_opt(m: nn.Module) -> torch.optim.Optimizer:
        if opt_name == "sgd":
            return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        return torch.optim.AdamW(m.parameters(), lr=0.01)

    oa, ob = make_opt(a), make_opt(b)
    big = _step(a, oa, 1, clip_grad_norm=0.5)
    small = _step(b, ob, k, clip_grad_norm=0.5)
    for update in range(3):
        xb, yb = x[update * 16 : (update + 1) * 16], y[update * 16 : (update + 1) * 16]
        out_big = big([(xb, yb)])
        chunks = list(zip(xb.chunk(k), yb.chunk(k)))
        out_small = small(chunks)
        assert out_small.loss == pytest.approx(out_big.loss, rel=1e-5)
        assert out_small.grad_norm == pytest.approx(out_big.grad_norm, rel=1e-5)
        assert out_small.samples == out_big.samples == 16
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)


def test_schedule_counts_updates_not_micro_batches() -> None:
    result = train(regression_task(), lr=0.01, run_steps=12, accumulation_steps=3, warmup=4, device="cpu")
    assert result.updates == 12 and result.steps == list(range(12))
    assert result.samples == 12 * 3 * 16
    assert result.lrs == pytest.approx(list(tunekit.lr_schedule(12, 0.01, 4, "cosine", 0.1)))


def test_bf16_path_runs_under_autocast() -> None:
    dtypes: list[torch.dtype] = []

    def compute(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        out = model(batch[0])
        dtypes.append(out.dtype)
        return nn.functional.mse_loss(out.float(), batch[1])

    task = Task(model=MLP, train_data=regression_data(128), compute_loss=compute, batch_size=16)
    result = train(task, lr=1e-2, run_steps=20, precision="bf16", device="cpu")
    assert set(dtypes) == {torch.bfloat16}
    assert not result.diverged and result.updates == 20
    assert result.losses[-1] < result.losses[0]
    assert result.config["precision"] == "bf16"


def test_scaler_skipped_step_is_reported_and_params_untouched() -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # A scale this large overflows the scaled gradients: the scaler must skip.
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**120)
    step = _step(model, opt, 1, precision="fp16", scaler=scaler)
    before = [p.detach().clone() for p in model.parameters()]
    x, y = regression_data(16).tensors
    out = step([(x, y)])
    assert out.finite and out.skipped
    assert scaler.get_scale() < 2.0**120
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p, q)


def test_skipped_steps_are_not_counted_as_updates() -> None:
    # Loss scaled by 1e4: fp16 gradients overflow at the default scale (65536)
    # until the scaler has backed off, so the first steps are skipped.
    def compute(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return 1e4 * nn.functional.mse_loss(model(batch[0]).float(), batch[1])

    task = Task(model=MLP, train_data=regression_data(256), compute_loss=compute, batch_size=16)
    result = train(task, lr=1e-4, run_steps=15, precision="fp16", warmup=5, device="cpu")
    assert result.skipped_steps >= 1
    assert result.updates == 15 and result.steps == list(range(15))
    # The schedule advanced once per real update, skips excluded.
    assert result.lrs == pytest.approx(list(tunekit.lr_schedule(15, 1e-4, 5, "cosine", 0.1)))


def test_make_scaler_only_for_fp16() -> None:
    assert make_scaler("fp32", CPU) is None
    assert make_scaler("bf16", CPU) is None
    assert isinstance(make_scaler("fp16", CPU), torch.amp.GradScaler)


def test_divergence_is_reported_not_raised() -> None:
    task = Task(
        model=lambda: nn.Linear(8, 1),
        train_data=regression_data(128),
        loss=nn.MSELoss(),
        optimizer=lambda p: torch.optim.SGD(p, lr=1.0),
        batch_size=16,
    )
    result = train(task, lr=1e4, run_steps=50, clip_grad_norm=None, warmup=0, device="cpu")
    assert result.diverged
    assert result.diverged_at is not None and result.diverged_at < 50
    assert result.updates == result.diverged_at
    assert result.final_loss == math.inf
    assert all(math.isfinite(v) for v in result.losses)


def test_nan_loss_is_divergence_and_drops_the_update() -> None:
    calls = {"n": 0}

    def compute(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls["n"] += 1
        loss = nn.functional.mse_loss(model(batch[0]), batch[1])
        return loss * float("nan") if calls["n"] == 4 else loss

    task = Task(model=MLP, train_data=regression_data(128), compute_loss=compute, batch_size=16)
    result = train(task, lr=1e-2, run_steps=10, device="cpu")
    assert result.diverged and result.diverged_at == 3 and result.updates == 3


def test_clipping_bounds_the_update_and_reports_the_raw_norm() -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    step = _step(model, opt, 1, clip_grad_norm=1e-3)
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    x, y = regression_data(16).tensors
    out = step([(x, y * 100)])
    moved = torch.nn.utils.parameters_to_vector(model.parameters()).detach() - before
    assert out.grad_norm > 1.0  # the norm before clipping
    assert moved.norm().item() == pytest.approx(1e-3, rel=1e-3)  # SGD lr=1 moves by the clipped norm


def test_runs_are_deterministic_and_leave_global_rng_alone() -> None:
    task = classification_task()
    state = torch.get_rng_state()
    a = train(task, lr=1e-2, run_steps=15, eval_every=5, device="cpu", seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    b = train(task, lr=1e-2, run_steps=15, eval_every=5, device="cpu", seed=3)
    c = train(task, lr=1e-2, run_steps=15, eval_every=5, device="cpu", seed=4)
    assert a.losses == b.losses and a.evals == b.evals
    assert a.losses != c.losses


def test_eval_callback_sees_metrics_and_can_stop() -> None:
    seen: list[tuple[int, dict[str, float]]] = []

    def cb(step: int, metrics: dict[str, float]) -> bool:
        seen.append((step, metrics))
        return step >= 10

    result = train(classification_task(), lr=1e-2, run_steps=30, eval_every=5, callback=cb, device="cpu")
    assert [s for s, _ in seen] == [5, 10]
    assert result.stopped_early and result.updates == 10
    assert set(seen[0][1]) == {"loss", "accuracy"}
    assert 0.0 <= seen[0][1]["accuracy"] <= 1.0


def test_param_group_lr_ratios_are_kept() -> None:
    def two_groups(params: object) -> torch.optim.Optimizer:
        params = list(params)  # type: ignore[call-overload]
        return torch.optim.SGD([{"params": params[:2], "lr": 1.0}, {"params": params[2:], "lr": 0.1}])

    torch.manual_seed(0)
    model = MLP()
    opt = two_groups(model.parameters())
    step = _step(model, opt, 1)
    step.set_lr(0.5)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.5, 0.05])


def test_results_print_one_short_line_and_a_table() -> None:
    from tunekit import lr_find, probe

    task = classification_task()
    r = train(task, lr=1e-2, run_steps=10, eval_every=5, device="cpu")
    assert repr(r).startswith("TrainResult(task='classification', lr=0.01, updates=10, final loss ") and len(repr(r)) < 120
    assert r.table().splitlines()[-1].startswith("final val loss ") and "after 10 updates (320 samples)" in r.table()
    lf = lr_find(task, sweep=Sweep(sweep_steps=20), step=StepSettings(device="cpu"))
    assert repr(lf).startswith("LRFindResult(suggestion=") and len(repr(lf)) < 120
    pr = probe(task, memory_budget="256MiB", step=StepSettings(device="cpu"),
               measure=Measurement(throughput_points=2, noise_repeats=2))
    assert repr(pr).startswith("ProbeResult(device='cpu', max_batch=") and len(repr(pr)) < 150


def test_the_train_table_shows_each_rows_last_evaluation() -> None:
    """Evaluations fall inside the printed rows (at updates 124, 155 for rows ending 125, 156): each
    row shows the last evaluation within it, none left blank."""
    from tunekit.results import TrainResult

    n = 200
    r = TrainResult(config={"lr": 0.1, "schedule": "cosine", "warmup": 0.05, "batch_size": 8, "accumulation_steps": 1,
                            "precision": "fp32"}, task="t", device="cpu")
    r.steps, r.lrs, r.losses = list(range(n)), [0.1] * n, [1.0] * n
    r.evals = [{"step": s, "loss": 0.5 + s / 1000} for s in range(24, n + 1, 25)]  # one before each row ends
    r.updates = n
    rows = [ln for ln in r.table().splitlines() if ln.strip() and ln.split()[0].isdigit()]
    blank = [ln for ln in rows if len(ln.split()) < 4]
    with_eval = [ln for ln in rows if len(ln.split()) >= 4]
    assert with_eval and not blank, r.table()
