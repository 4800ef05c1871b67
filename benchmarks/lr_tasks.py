"""The LR benchmark's own tasks (issue 11): small seeded synthetic problems of many kinds.

Each entry of ``TASKS`` is a :class:`Spec`: a factory ``() -> tunekit.Task`` and
the classes the task stands for (optimizer family, loss, architecture, regime,
batch size, run length), plus the log10 LR range its ground-truth grid starts
from. All data is made in-process from fixed generators (or from Python's own
standard-library source text); nothing is downloaded. The data does not depend
on the run's seed; the weights do (tunekit seeds the model factory).

Regimes other than "scratch" start from a backbone pretrained in-process on a
related synthetic task, once: through ``tunekit.train`` (seed 0), saved as a
state_dict under ``benchmarks/.cache/lr_tasks/`` and read back afterwards.

- fine-tune: all weights of the pretrained backbone train, with a fresh head;
- lora: the backbone is frozen and rank-r adapters ``W x + (alpha/r) B A x``
  (A random, B zero) are trained on its Linear layers;
- head: the backbone is frozen (BatchNorm statistics included) and only a new
  linear head trains.

Every task trains to a final validation loss in about 1-4 s on one CPU thread.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

import tunekit
from tunekit import Task

from benchmarks.search_tasks import LM_VOCAB, GratingCNN, TinyGPT, _LM_INDEX, gratings, lm_loss

__all__ = ["Spec", "TASKS", "CACHE", "LoRALinear", "add_lora"]

CACHE = Path(os.environ.get("TUNEKIT_BENCH_CACHE", Path(__file__).resolve().parent / ".cache" / "lr_tasks"))


@dataclass(frozen=True)
class Spec:
    """One benchmark task: its factory, its classes, and where its grid starts (log10 LR)."""

    make: Callable[[], Task]
    optimizer: str  # adamw | adam | sgd-momentum | sgd-nesterov | rmsprop
    loss: str  # ce | ce-smooth | mse | huber | bce
    arch: str  # mlp | cnn-bn | transformer-lm | lstm | gru
    regime: str  # scratch | finetune | lora | head
    batch: int
    steps: int
    grid: tuple[float, float]  # log10 of the lowest and highest grid LR to start with
    note: str = ""
    tags: dict[str, Any] = field(default_factory=dict)

    def classes(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "loss": self.loss, "arch": self.arch, "regime": self.regime,
                "batch": self.batch, "steps": self.steps}


def _split(data: TensorDataset, n_val: int) -> tuple[TensorDataset, TensorDataset]:
    """The last ``n_val`` samples are validation, the rest training."""
    return (TensorDataset(*(t[:-n_val] for t in data.tensors)), TensorDataset(*(t[-n_val:] for t in data.tensors)))


def _defaults(steps: int, **more: Any) -> dict[str, Any]:
    # One evaluation at the end, on the whole validation set, in large batches.
    return {"max_steps": steps, "eval_every": None, "eval_batches": None, "eval_batch_size": 256} | more


# --- data ----------------------------------------------------------------------------------


class _Teacher:
    """A random two-layer tanh network: shared features, several readouts."""

    def __init__(self, dim: int, hidden: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.dim, self.g = dim, g
        self.w1 = torch.randn(dim, hidden, generator=g) / math.sqrt(dim)
        self.hidden = hidden

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(2 * x @ self.w1)

    def readout(self, out: int, seed: int, scale: float = 3.0) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randn(self.hidden, out, generator=g) / math.sqrt(self.hidden) * scale


def teacher_classes(n: int, *, dim: int = 24, classes: int = 6, seed: int = 2468, readout_seed: int = 1,
                    temperature: float = 0.3, data_seed: int = 11) -> TensorDataset:
    """Gaussian inputs labelled by sampling a random teacher's softmax (noisy labels)."""
    t = _Teacher(dim, 64, seed)
    g = torch.Generator().manual_seed(data_seed)
    x = torch.randn(n, dim, generator=g)
    logits = t.features(x) @ t.readout(classes, readout_seed) / temperature
    y = torch.multinomial(torch.softmax(logits, 1), 1, generator=g).squeeze(1)
    return TensorDataset(x, y)


def teacher_regression(n: int, *, dim: int = 16, outputs: int = 1, noise: float = 0.3, seed: int = 97,
                       heavy_tails: bool = False) -> TensorDataset:
    """Targets of a random tanh teacher plus noise, standardized to mean 0, std 1 per output."""
    t = _Teacher(dim, 48, seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, dim, generator=g)
    y = t.features(x) @ t.readout(outputs, seed + 2, scale=1.0)
    y = y + 0.5 * torch.sin(3 * x[:, :1])  # a little extra nonlinearity
    eps = torch.randn(n, outputs, generator=g)
    if heavy_tails:  # Student-t-like noise: a few large outliers, where Huber matters
        # Gamma's sampler takes no generator: the global RNG, seeded here and put back (the same data in every process).
        with torch.random.fork_rng():
            torch.manual_seed(seed + 3)
            scale = torch.distributions.Gamma(1.5, 1.5).sample((n, 1))
        eps = eps / torch.sqrt(scale.clamp_min(0.05))
    y = y / y.std(0) + noise * eps
    y = (y - y.mean(0)) / y.std(0)
    return TensorDataset(x, y)


def teacher_multilabel(n: int, *, dim: int = 32, labels: int = 12, seed: int = 555) -> TensorDataset:
    """Each of ``labels`` binary labels is a Bernoulli draw of a random teacher's sigmoid."""
    t = _Teacher(dim, 64, seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, dim, generator=g)
    logits = t.features(x) @ t.readout(labels, seed + 2, scale=4.0) - 0.5
    y = torch.bernoulli(torch.sigmoid(logits), generator=g)
    return TensorDataset(x, y)


SEQ_LEN, SEQ_VOCAB, SEQ_CLASSES = 24, 10, 5


def count_sequences(n: int, seed: int = 8080, flip: float = 0.1) -> TensorDataset:
    """Token sequences; the class is which of tokens 0..4 occurs most often after the first
    occurrence of token 9 (the whole sequence if none), labels flipped with probability ``flip``.
    It needs memory of a marker and counting: a recurrent net's job."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, SEQ_VOCAB, (n, SEQ_LEN), generator=g)
    marker = (x == 9).float()
    after = (marker.cumsum(1) > 0).float()
    after = torch.where(marker.sum(1, keepdim=True) > 0, after, torch.ones_like(after))
    counts = torch.stack([((x == k).float() * after).sum(1) for k in range(SEQ_CLASSES)], 1)
    y = (counts + 0.01 * torch.rand(n, SEQ_CLASSES, generator=g)).argmax(1)  # ties broken at random
    noisy = torch.rand(n, generator=g) < flip
    y = torch.where(noisy, torch.randint(0, SEQ_CLASSES, (n,), generator=g), y)
    return TensorDataset(x, y)


PRETRAIN_MODULES = ("textwrap", "heapq", "bisect", "fnmatch", "colorsys", "shlex", "queue", "sched", "glob",
                    "fractions", "calendar", "copy", "keyword", "numbers", "operator", "pprint", "reprlib")
FINETUNE_MODULES = ("csv", "json.decoder", "json.encoder", "dataclasses")


@lru_cache(maxsize=4)
def corpus(modules: tuple[str, ...]) -> str:
    parts = []
    for name in modules:
        try:
            parts.append(inspect.getsource(importlib.import_module(name)))
        except (ImportError, OSError, TypeError):
            continue
    return "".join(c for c in "\n\n".join(parts) if c in _LM_INDEX)


def char_data(modules: tuple[str, ...], context: int, n_val: int, seed: int = 1357,
              max_windows: int | None = None) -> tuple[TensorDataset, TensorDataset]:
    ids = torch.tensor([_LM_INDEX[c] for c in corpus(modules)], dtype=torch.long)
    n = (len(ids) - 1) // context
    x, y = ids[: n * context].view(n, context), ids[1: n * context + 1].view(n, context)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    if max_windows is not None:
        order = order[: max_windows + n_val]
    return _split(TensorDataset(x[order], y[order]), n_val)


# --- models --------------------------------------------------------------------------------


def mlp(dim: int, hidden: int, depth: int, out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = dim
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, out))


class SeqGRU(nn.Module):
    def __init__(self, vocab: int = SEQ_VOCAB, dim: int = 16, hidden: int = 48, classes: int = SEQ_CLASSES) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.GRU(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.rnn(self.emb(x))
        return self.head(h[-1])


class CharLSTM(nn.Module):
    def __init__(self, vocab: int, dim: int = 48, hidden: int = 128) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.emb(x))
        return self.head(out)


class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update: ``W x + b + (alpha / r) B A x``."""

    def __init__(self, base: nn.Linear, rank: int = 4, alpha: float = 8.0) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + F.linear(F.linear(x, self.A), self.B) * self.scale


def add_lora(model: nn.Module, rank: int = 4, alpha: float = 8.0, skip: tuple[str, ...] = ("head",)) -> nn.Module:
    """Freeze ``model`` and wrap each of its Linear layers (but those named in ``skip``) in a LoRALinear."""
    model.requires_grad_(False)
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name not in skip:
                setattr(module, child_name, LoRALinear(child, rank, alpha))
    return model


class FrozenFeatures(nn.Module):
    """A frozen feature extractor (kept in eval mode, BatchNorm statistics fixed) and a trainable head."""

    def __init__(self, features: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.features = features.requires_grad_(False)
        self.head = head

    def train(self, mode: bool = True) -> FrozenFeatures:
        super().train(mode)
        self.features.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            f = self.features(x).flatten(1)
        return self.head(f)


# --- pretraining ---------------------------------------------------------------------------


def pretrained(key: str, task: Task, *, lr: float, steps: int) -> dict[str, torch.Tensor]:
    """The state_dict of ``task``'s model after one seeded ``tunekit.train`` run, cached under CACHE.

    The run goes through tunekit.train; the trained module is caught from the
    model factory (train builds the model through it and trains it in place).
    """
    path = CACHE / f"{key}.pt"
    if path.exists():
        return torch.load(path, weights_only=True)
    built: list[nn.Module] = []
    factory = task.model

    def catch() -> nn.Module:
        m = factory()
        built.append(m)
        return m

    result = tunekit.train(dataclasses.replace(task, model=catch), lr=lr, run_steps=steps, seed=0, device="cpu")
    if result.diverged or not math.isfinite(result.final_loss):
        raise RuntimeError(f"pretraining {key} diverged at lr={lr}")
    state = {k: v.detach().clone() for k, v in built[-1].state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(state, tmp)
    tmp.replace(path)
    print(f"  (pretrained {key}: {steps} updates at lr={lr:g}, val loss {result.final_loss:.4f}, cached to {path})",
          flush=True)
    return state


# --- the tasks -----------------------------------------------------------------------------


def mlp_sgdm_ce() -> Task:
    """The issue's SGD-momentum MLP miss: a 3-layer ReLU MLP on a noisy 6-class teacher."""
    train, val = _split(teacher_classes(8192 + 1024), 1024)
    return Task(model=lambda: mlp(24, 128, 3, 6), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=5e-4),
                batch_size=64, name="mlp_sgdm_ce", defaults=_defaults(300))


def mlp_mse_adamw() -> Task:
    """The issue's regression miss: an MLP with MSE on standardized targets."""
    train, val = _split(teacher_regression(4096 + 1024), 1024)
    return Task(model=lambda: mlp(16, 128, 2, 1), train_data=train, val_data=val, loss=nn.MSELoss(),
                optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01),
                batch_size=128, name="mlp_mse_adamw", defaults=_defaults(200))


def mlp_huber_sgdm() -> Task:
    """Huber regression on heavy-tailed targets, small batches, a longer run, SGD momentum."""
    train, val = _split(teacher_regression(4096 + 1024, dim=12, outputs=3, seed=313, heavy_tails=True), 1024)
    return Task(model=lambda: mlp(12, 96, 2, 3), train_data=train, val_data=val, loss=nn.HuberLoss(delta=1.0),
                optimizer=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
                batch_size=16, name="mlp_huber_sgdm", defaults=_defaults(400))


def mlp_bce_adam() -> Task:
    """Multi-label BCE with logits, large batches, a short run, Adam without weight decay."""
    train, val = _split(teacher_multilabel(8192 + 1024), 1024)
    return Task(model=lambda: mlp(32, 256, 2, 12), train_data=train, val_data=val, loss=nn.BCEWithLogitsLoss(),
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3),
                batch_size=256, name="mlp_bce_adam", defaults=_defaults(100))


def cnn_bn_nesterov_ls() -> Task:
    """A BatchNorm CNN on noisy gratings, label-smoothed CE, SGD with Nesterov momentum."""
    train, val = _split(gratings(4096 + 512, seed=4321), 512)
    return Task(model=lambda: GratingCNN(12), train_data=train, val_data=val,
                loss=nn.CrossEntropyLoss(label_smoothing=0.1),
                optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4),
                batch_size=32, name="cnn_bn_nesterov_ls", defaults=_defaults(200))


def gpt2_charlm() -> Task:
    """The issue's 2-layer GPT-2-style char LM (pre-norm, learned positions), AdamW, from scratch."""
    train, val = char_data(PRETRAIN_MODULES, 32, 384)
    return Task(model=lambda: TinyGPT(len(LM_VOCAB), 64, 2, 4, 32), train_data=train, val_data=val, loss=lm_loss,
                optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1),
                batch_size=32, name="gpt2_charlm", defaults=_defaults(150))


def lstm_charlm_adam() -> Task:
    """A one-layer LSTM char LM on other source files, small batches, Adam without decay."""
    train, val = char_data(FINETUNE_MODULES, 48, 256)
    return Task(model=lambda: CharLSTM(len(LM_VOCAB)), train_data=train, val_data=val, loss=lm_loss,
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3),
                batch_size=16, name="lstm_charlm_adam", defaults=_defaults(200))


def gru_count_rmsprop() -> Task:
    """A GRU classifying token sequences by a count after a marker, RMSprop."""
    train, val = _split(count_sequences(8192 + 1024), 1024)
    return Task(model=lambda: SeqGRU(), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.99),
                batch_size=64, name="gru_count_rmsprop", defaults=_defaults(250))


# Fine-tuning: an MLP pretrained on one readout of a teacher, tuned on another readout with few samples.

def _ft_mlp_pretrained() -> dict[str, torch.Tensor]:
    train, val = _split(teacher_classes(16384 + 1024, dim=24, classes=10, seed=777, readout_seed=21,
                                        temperature=0.3, data_seed=31), 1024)
    task = Task(model=lambda: mlp(24, 128, 3, 10), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01), batch_size=128,
                name="pretrain_mlp", defaults=_defaults(600))
    return pretrained("mlp-teacher777-v1", task, lr=3e-3, steps=600)


def shifted_teacher_classes(n: int, *, shift: float = 0.5, mix: float = 0.6, data_seed: int = 32) -> TensorDataset:
    """The pretraining task under a domain shift: inputs shifted by ``shift`` on half the
    dimensions, and the teacher's readout perturbed by ``mix`` times another random readout."""
    t = _Teacher(24, 64, 777)
    g = torch.Generator().manual_seed(data_seed)
    x = torch.randn(n, 24, generator=g)
    x[:, :12] += shift
    w = t.readout(10, 21) + mix * t.readout(10, 23)
    y = torch.multinomial(torch.softmax(t.features(x) @ w / 0.3, 1), 1, generator=g).squeeze(1)
    return TensorDataset(x, y)


def ft_mlp_adamw() -> Task:
    """Full fine-tuning of the pretrained 10-class MLP (its head kept) on 1024 samples of a shifted task, AdamW."""
    state = _ft_mlp_pretrained()
    train, val = _split(shifted_teacher_classes(1024 + 1024), 1024)

    def model() -> nn.Module:
        m = mlp(24, 128, 3, 10)
        m.load_state_dict(state)
        return m

    return Task(model=model, train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.01),
                batch_size=32, name="ft_mlp_adamw", defaults=_defaults(150))


# LoRA: the 2-layer GPT pretrained on one set of stdlib modules, adapted to another.

def _gpt_pretrained() -> dict[str, torch.Tensor]:
    train, val = char_data(PRETRAIN_MODULES, 32, 384)
    task = Task(model=lambda: TinyGPT(len(LM_VOCAB), 64, 2, 4, 32), train_data=train, val_data=val, loss=lm_loss,
                optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1),
                batch_size=32, name="pretrain_gpt", defaults=_defaults(800))
    return pretrained("gpt2x64-stdlib-v1", task, lr=2e-3, steps=800)


def lora_gpt_adamw() -> Task:
    """Rank-4 LoRA adapters on every Linear of the frozen pretrained GPT but its head, on new source files."""
    state = _gpt_pretrained()
    train, val = char_data(FINETUNE_MODULES, 32, 384, max_windows=3000)

    def model() -> nn.Module:
        m = TinyGPT(len(LM_VOCAB), 64, 2, 4, 32)
        m.load_state_dict(state)
        return add_lora(m, rank=4, alpha=8.0)

    return Task(model=model, train_data=train, val_data=val, loss=lm_loss,
                optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.0),
                batch_size=32, name="lora_gpt_adamw", defaults=_defaults(150))


# Head only: the BatchNorm CNN pretrained on 8 grating classes, a new head for a relabelled, noisier set.

def _cnn_pretrained() -> dict[str, torch.Tensor]:
    train, val = _split(gratings(8192 + 512, seed=99), 512)
    task = Task(model=lambda: GratingCNN(12), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01), batch_size=64,
                name="pretrain_cnn", defaults=_defaults(500))
    return pretrained("gratingcnn12-v1", task, lr=3e-3, steps=500)


def head_cnn_adam() -> Task:
    """A new linear head on the frozen pretrained CNN: 4 classes (orientation only), noisier images, Adam."""
    state = _cnn_pretrained()
    data = gratings(2048 + 512, seed=1234, noise=1.4)
    labels = data.tensors[1] % 4
    train, val = _split(TensorDataset(data.tensors[0], labels), 512)

    def model() -> nn.Module:
        base = GratingCNN(12)
        base.load_state_dict(state)
        return FrozenFeatures(base.features, nn.Linear(base.head.in_features, 4))

    return Task(model=model, train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3),
                batch_size=64, name="head_cnn_adam", defaults=_defaults(120))


def ft_cnn_nesterov() -> Task:
    """Full fine-tuning of the pretrained BatchNorm CNN (new head) on few noisier, relabelled images, Nesterov SGD."""
    state = _cnn_pretrained()
    data = gratings(1024 + 512, seed=2024, noise=1.4)
    labels = data.tensors[1] % 4
    train, val = _split(TensorDataset(data.tensors[0], labels), 512)
    backbone = {k: v for k, v in state.items() if not k.startswith("head.")}

    def model() -> nn.Module:
        m = GratingCNN(12)
        m.head = nn.Linear(m.head.in_features, 4)
        m.load_state_dict(backbone, strict=False)
        return m

    return Task(model=model, train_data=train, val_data=val, loss=nn.CrossEntropyLoss(label_smoothing=0.1),
                optimizer=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True),
                batch_size=32, name="ft_cnn_nesterov", defaults=_defaults(120))


TASKS: dict[str, Spec] = {
    "mlp_sgdm_ce": Spec(mlp_sgdm_ce, "sgd-momentum", "ce", "mlp", "scratch", 64, 300, (-3.0, 1.0)),
    "mlp_mse_adamw": Spec(mlp_mse_adamw, "adamw", "mse", "mlp", "scratch", 128, 200, (-4.0, 0.0)),
    "mlp_huber_sgdm": Spec(mlp_huber_sgdm, "sgd-momentum", "huber", "mlp", "scratch", 16, 400, (-3.0, 1.0)),
    "mlp_bce_adam": Spec(mlp_bce_adam, "adam", "bce", "mlp", "scratch", 256, 100, (-4.0, 0.0)),
    "cnn_bn_nesterov_ls": Spec(cnn_bn_nesterov_ls, "sgd-nesterov", "ce-smooth", "cnn-bn", "scratch", 32, 200,
                               (-3.0, 1.0)),
    "gpt2_charlm": Spec(gpt2_charlm, "adamw", "ce", "transformer-lm", "scratch", 32, 150, (-4.0, 0.0)),
    "lstm_charlm_adam": Spec(lstm_charlm_adam, "adam", "ce", "lstm", "scratch", 16, 200, (-4.0, 0.0)),
    "gru_count_rmsprop": Spec(gru_count_rmsprop, "rmsprop", "ce", "gru", "scratch", 64, 250, (-4.5, -0.5)),
    "ft_mlp_adamw": Spec(ft_mlp_adamw, "adamw", "ce", "mlp", "finetune", 32, 150, (-5.0, -1.0)),
    "lora_gpt_adamw": Spec(lora_gpt_adamw, "adamw", "ce", "transformer-lm", "lora", 32, 150, (-4.0, 0.0)),
    "head_cnn_adam": Spec(head_cnn_adam, "adam", "ce", "cnn-bn", "head", 64, 120, (-4.0, 0.0)),
    "ft_cnn_nesterov": Spec(ft_cnn_nesterov, "sgd-nesterov", "ce-smooth", "cnn-bn", "finetune", 32, 120,
                            (-4.0, 0.0)),
}
