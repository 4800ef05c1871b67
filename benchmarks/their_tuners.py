"""tunekit on the user's own objects against the tuners those objects come with.

1. Lightning: ``Tuner(trainer).lr_find(module, datamodule)`` (its suggestion, the steepest descent)
   against ``tunekit.lr_find(LightningRun(module, datamodule, trainer))``, on LightningModules
   tunekit's rules were not tuned on. Each suggestion is judged by the run the user plans: the
   module's own ``trainer.fit`` for the Trainer's ``max_steps`` (its constant LR), at the suggested
   LR, against the best LR of a grid of the same runs (seed means). Reported: the suggestion, its
   ratio to the grid's best, the regret of its final validation loss, the finder's cost in
   updates, and whether the module came back bitwise.
2. Hugging Face: ``trainer.hyperparameter_search(backend="optuna", n_trials=N)`` (its default space)
   against ``tunekit.search(trainer, trials=N)`` on a tiny GPT-2, the same Trainer. Each search's
   best configuration is trained again by the Trainer from other seeds; reported: that mean
   validation loss, and the samples each search spent (probes included).

    python -m benchmarks.their_tuners [--seeds 2] [--trials 6] [--parts lightning,hf]
    python -m benchmarks.their_tuners --quick   # Lightning only: one module, 1 seed, 3 grid LRs, runs of 50
                                                # updates (--parts lightning,hf --quick adds HF: 1 seed, 2 trials)

Every run is on the CPU with one thread. The figures are written, with the hardware, to
benchmarks/data/their_tuners_report.txt (a quick run's to a temporary folder).
"""

from __future__ import annotations

import argparse
import copy
import math
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks._common import recorded  # noqa: E402
from benchmarks.harness import report  # noqa: E402

import tunekit  # noqa: E402
from tunekit.integrations import training_arguments  # noqa: E402

GRID = np.logspace(-4, 0, 9)


# --------------------------------------------------------------------------- Lightning tasks

def _lightning_classes(net: Callable[[], nn.Module], optimizer: str) -> tuple[type, type]:
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self, lr: float = 1e-3) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.lr = lr
            self.net = net()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return nn.functional.cross_entropy(self(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", nn.functional.cross_entropy(self(batch[0]), batch[1]))

        def configure_optimizers(self) -> Any:
            if optimizer == "sgd":
                return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
            return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.01)

    return Module, L.LightningDataModule


def _points(n: int, seed: int, dim: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 4, generator=torch.Generator().manual_seed(99))
    return TensorDataset(x, (x @ w + 0.5 * torch.randn(n, 4, generator=g)).argmax(1))


def _images(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = 0.8 * torch.randn(n, 1, 12, 12, generator=g)
    for k in range(4):  # each class brightens one quadrant
        x[y == k, :, (k // 2) * 6:(k // 2) * 6 + 6, (k % 2) * 6:(k % 2) * 6 + 6] += 0.7
    return TensorDataset(x, y)


def _data_module(base: type, data: Callable[[int, int], TensorDataset], batch: int) -> type:
    class Data(base):  # type: ignore[misc, valid-type]
        def setup(self, stage: str) -> None:
            self.train, self.val = data(2048, 1), data(512, 2)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.train, batch_size=batch, shuffle=True)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(self.val, batch_size=256)

    return Data


def lightning_tasks() -> dict[str, dict[str, Any]]:
    mlp = lambda: nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))  # noqa: E731
    cnn = lambda: nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),  # noqa: E731
                                nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    tasks = {}
    for name, net, opt, data, steps in (("mlp-adamw", mlp, "adamw", lambda n, s: _points(n, s, 16), 300),
                                        ("mlp-sgd", mlp, "sgd", lambda n, s: _points(n, s, 16), 300),
                                        ("cnn-adamw", cnn, "adamw", _images, 200)):
        module, base = _lightning_classes(net, opt)
        tasks[name] = {"module": module, "data": _data_module(base, data, 32), "steps": steps}
    return tasks


def _trainer(steps: int, root: str) -> Any:
    import lightning as L

    return L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator="cpu", default_root_dir=root, num_sanity_val_steps=0,
                     check_val_every_n_epoch=10**6)


def _fit(task: dict[str, Any], lr: float, seed: int, root: str) -> float:
    """The user's planned run: their module at ``lr``, their Trainer's fit; the final validation loss."""
    import lightning as L

    L.seed_everything(seed, verbose=False)
    module, data = task["module"](lr=lr), task["data"]()
    trainer = _trainer(task["steps"], root)
    trainer.fit(module, datamodule=data)
    loss = float(trainer.validate(module, datamodule=data, verbose=False)[0]["val_loss"])
    return loss if math.isfinite(loss) else math.inf


def _lightning_finders(task: dict[str, Any], seed: int, root: str) -> dict[str, tuple[float, int, bool]]:
    """{finder: (suggested LR, its updates, module bitwise unchanged)}."""
    import lightning as L
    from lightning.pytorch.tuner import Tuner

    from tunekit.integrations import LightningRun

    out = {}
    L.seed_everything(seed, verbose=False)
    module = task["module"]()
    before = copy.deepcopy(module.state_dict())
    finder = Tuner(_trainer(task["steps"], root)).lr_find(module, datamodule=task["data"](),
                                                          min_lr=1e-6, max_lr=1.0, update_attr=False)
    same = all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    out["lightning Tuner.lr_find"] = (float(finder.suggestion() or math.nan), 100, same)
    L.seed_everything(seed, verbose=False)
    module = task["module"]()
    before = copy.deepcopy(module.state_dict())
    found = tunekit.lr_find(LightningRun(module, task["data"](), _trainer(task["steps"], root)), seed=seed,
                            progress=False)
    same = all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    out["tunekit.lr_find"] = (float(found.suggestion), int(found.samples // 32), same)
    return out


def lightning_part(seeds: int, tasks: dict[str, dict[str, Any]] | None = None, lrs: Any = GRID) -> None:
    """Each task's grid over ``lrs`` and both finders' suggestions (``tasks``: lightning_tasks()'s, unless given)."""
    print("\n== Lightning: Tuner.lr_find vs tunekit.lr_find, judged by the module's own planned fit ==")
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for name, task in (tasks or lightning_tasks()).items():
            grid = {lr: float(np.mean([_fit(task, lr, s, root) for s in range(seeds)])) for lr in lrs}
            best_lr = min(grid, key=grid.get)
            print(f"{name}: {task['steps']} updates; grid best lr {best_lr:.3g}, loss {grid[best_lr]:.4f}")
            for seed in range(seeds):
                for finder, (lr, updates, same) in _lightning_finders(task, seed, root).items():
                    loss = float(np.mean([_fit(task, lr, s, root) for s in range(seeds)])) if lr > 0 else math.inf
                    rows.append((name, finder, seed, lr, lr / best_lr, loss / grid[best_lr] - 1, updates, same))
                    print(f"  {finder:24} seed {seed}: lr {lr:.3g} ({lr / best_lr:.2f}x best), regret "
                          f"{100 * (loss / grid[best_lr] - 1):.2f}%, {updates} updates, module back bitwise: {same}")
    for finder in ("lightning Tuner.lr_find", "tunekit.lr_find"):
        regrets = [r[5] for r in rows if r[1] == finder]
        print(f"{finder:24} mean regret {100 * np.mean(regrets):.2f}%, worst {100 * max(regrets):.2f}%, "
              f"median |log10 ratio| {np.median([abs(math.log10(r[4])) for r in rows if r[1] == finder]):.2f}")


# --------------------------------------------------------------------------- Hugging Face

def _tokens(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 48, (24,), generator=g)
        ids[1::2] = (ids[0::2] * 7 + 3) % 48  # every second token follows from the one before
        out.append({"input_ids": ids, "labels": ids})
    return out


def _model_init(trial: Any = None) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=48, n_head=2, vocab_size=48, n_positions=24,
                                      bos_token_id=0, eos_token_id=0))


def _hf_trainer(root: str, **over: Any) -> Any:
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    args = dict(output_dir=root, per_device_train_batch_size=16, learning_rate=5e-5, num_train_epochs=2,
                report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True, eval_strategy="epoch",
                logging_strategy="no", log_level="error")
    trainer = Trainer(model_init=_model_init, args=TrainingArguments(**{**args, **over}), train_dataset=_tokens(512, 1),
                      eval_dataset=_tokens(128, 2))
    trainer.remove_callback(PrinterCallback)  # its per-epoch dicts on stdout: not this report's figures
    return trainer


def _retrain(root: str, changes: dict[str, Any], seeds: list[int]) -> float:
    """The best configuration, trained again by the Trainer from other seeds: the mean final eval loss."""
    losses = []
    for seed in seeds:
        trainer = _hf_trainer(root, seed=seed, **changes)
        trainer.train()
        losses.append(float(trainer.evaluate()["eval_loss"]))
    return float(np.mean(losses))


def _hf_search(root: str, seed: int, trials: int) -> tuple[dict[str, Any], int]:
    """HF's own search, its default space: (the best TrainingArguments, the samples its trials drew)."""
    import optuna

    storage, name = f"sqlite:///{root}/hf{seed}.db", f"hf{seed}"
    best = _hf_trainer(root).hyperparameter_search(direction="minimize", backend="optuna", n_trials=trials,
                                                   sampler=optuna.samplers.TPESampler(seed=seed), storage=storage,
                                                   study_name=name)
    study = optuna.load_study(study_name=name, storage=storage)
    drawn = sum(512 * int(t.params.get("num_train_epochs", 2)) for t in study.trials)
    return {k: v for k, v in best.hyperparameters.items() if k != "seed"}, drawn


def hf_part(seeds: int, trials: int) -> None:
    print(f"\n== Hugging Face: hyperparameter_search (optuna, its default space) vs tunekit.search, {trials} trials ==")
    ratios, costs = [], []
    with tempfile.TemporaryDirectory() as root:
        for seed in range(seeds):
            hf_args, hf_samples = _hf_search(root, seed, trials)
            result = tunekit.search(_hf_trainer(root), "from_scratch", trials=trials, seed=seed, progress=False)
            ours = training_arguments(result.best_config)
            held = [100 + 2 * seed, 101 + 2 * seed]  # seeds neither search saw
            hf_loss, our_loss = _retrain(root, hf_args, held), _retrain(root, ours, held)
            ratios.append(our_loss / hf_loss)
            costs.append(result.compute / hf_samples)
            print(f"seed {seed}: hyperparameter_search {hf_args} -> retrained eval loss {hf_loss:.4f}, {hf_samples} "
                  f"samples; tunekit {ours} -> {our_loss:.4f}, {result.compute} samples ({result.probe_samples} in "
                  f"probes); loss ratio {our_loss / hf_loss:.3f}, samples ratio {result.compute / hf_samples:.2f}")
    print(f"tunekit / hyperparameter_search: retrained loss ratio median {np.median(ratios):.3f}, "
          f"samples ratio median {np.median(costs):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--parts", default=None, help="lightning,hf (the default; --quick: lightning)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run, not a figure: Lightning only (unless --parts names hf), on one module "
                        "(mlp-adamw), 1 seed, a grid of 3 LRs, runs of 50 updates; HF, if asked: 1 seed, 2 trials")
    a = parser.parse_args()
    parts = a.parts or ("lightning" if a.quick else "lightning,hf")
    tasks, lrs = None, GRID
    if a.quick:
        a.seeds, a.trials = 1, 2
        tasks = {"mlp-adamw": {**lightning_tasks()["mlp-adamw"], "steps": 50}}
        lrs = GRID[2:7:2]  # 1e-3, 1e-2, 1e-1
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    with recorded() as out:
        if "lightning" in parts:
            lightning_part(a.seeds, tasks, lrs)
        if "hf" in parts:
            hf_part(a.seeds, a.trials)
    report.write("their_tuners", f"tunekit against the tuners of Lightning and Hugging Face ({parts}; {a.seeds} seeds)",
                 out.text(), quick=a.quick)

if __name__ == "__main__":
    main()
