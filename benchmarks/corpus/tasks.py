"""The corpus's new tasks on real data (the older synthetic and source-code tasks are reused from
``benchmarks/lr_tasks.py`` and ``benchmarks/search_tasks.py``; ``__init__`` lists them all).

Each function returns a fresh ``tunekit.Task``. Planned runs end with one evaluation on the whole
validation set (``_defaults``); the schedule is tunekit's (5% warmup, cosine to 10%) unless the
task is a constant-LR recipe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from benchmarks.corpus import data
from benchmarks.lr_tasks import FrozenFeatures, add_lora, mlp, pretrained
from benchmarks.search_tasks import LM_VOCAB, GratingCNN, TinyGPT, lm_loss
from tunekit import Task

V = len(LM_VOCAB)


def _defaults(steps: int, **more: Any) -> dict[str, Any]:
    return {"max_steps": steps, "eval_every": None, "eval_batches": None, "eval_batch_size": 256} | more


def _constant(steps: int) -> dict[str, Any]:
    """Lightning's default without a scheduler: the LR as given, from the first update to the last."""
    return _defaults(steps, schedule="constant", warmup=0.0, min_lr_ratio=1.0)


def _adamw(lr: float = 1e-3, wd: float = 0.01, **kw: Any) -> Any:
    return lambda p: torch.optim.AdamW(p, lr=lr, weight_decay=wd, **kw)


def _sgdm(wd: float = 5e-4, nesterov: bool = False) -> Any:
    return lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=nesterov, weight_decay=wd)


# --- models --------------------------------------------------------------------------------


class DigitsCNN(nn.Module):
    """conv-BN-ReLU, conv-BN-ReLU-pool, linear head, for 8x8 images (``bn=False``: no BatchNorm)."""

    def __init__(self, width: int = 16, classes: int = 10, bn: bool = True) -> None:
        super().__init__()
        norm = (lambda c: nn.BatchNorm2d(c)) if bn else (lambda c: nn.Identity())
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), norm(width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1), norm(2 * width), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(2 * width * 16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


@dataclass
class LMOutput:
    """What a Hugging Face causal LM returns: the loss (when labels are given) and the logits."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class DictGPT(nn.Module):
    """TinyGPT called as a Hugging Face model: ``model(input_ids=..., labels=...)`` returns ``.loss``."""

    def __init__(self, dim: int = 64, layers: int = 2, context: int = 32) -> None:
        super().__init__()
        self.net = TinyGPT(V, dim, layers, 4, context)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> LMOutput:
        logits = self.net(input_ids)
        return LMOutput(None if labels is None else lm_loss(logits, labels), logits)


class DictLSTM(nn.Module):
    """An LSTM LM with the same call as DictGPT."""

    def __init__(self, dim: int = 32, hidden: int = 96) -> None:
        super().__init__()
        self.emb, self.rnn, self.head = nn.Embedding(V, dim), nn.LSTM(dim, hidden, batch_first=True), nn.Linear(hidden, V)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> LMOutput:
        logits = self.head(self.rnn(self.emb(input_ids))[0])
        return LMOutput(None if labels is None else lm_loss(logits, labels), logits)


class DictDataset(Dataset):
    """Tensors served as Hugging Face-style dict samples: ``{key: tensor[i]}``."""

    def __init__(self, **tensors: torch.Tensor) -> None:
        self.tensors = tensors
        self.n = len(next(iter(tensors.values())))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[i] for k, v in self.tensors.items()}


def _as_dicts(d: TensorDataset, x: str, y: str) -> DictDataset:
    return DictDataset(**{x: d.tensors[0], y: d.tensors[1]})


class CharLSTM(nn.Module):
    def __init__(self, dim: int = 32, hidden: int = 96) -> None:
        super().__init__()
        self.emb, self.rnn, self.head = nn.Embedding(V, dim), nn.LSTM(dim, hidden, batch_first=True), nn.Linear(hidden, V)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(x))[0])


# --- tabular (real) ----------------------------------------------------------------------------


def digits_mlp_adamw() -> Task:
    train, val = data.split(data.table("digits"), 397)
    return Task(model=lambda: mlp(64, 128, 2, 10), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=_adamw(), batch_size=32, name="digits_mlp_adamw", defaults=_defaults(200))


def digits_mlp_sgdm() -> Task:
    train, val = data.split(data.table("digits"), 397, seed=1)
    return Task(model=lambda: mlp(64, 256, 3, 10), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=_sgdm(), batch_size=16, name="digits_mlp_sgdm", defaults=_defaults(300))


def cancer_mlp_rmsprop() -> Task:
    train, val = data.split(data.table("breast_cancer"), 169)
    return Task(model=lambda: mlp(30, 64, 2, 2), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.RMSprop(p, lr=1e-3), batch_size=32, name="cancer_mlp_rmsprop",
                defaults=_defaults(150))


# --- CNNs on images (real) ---------------------------------------------------------------------


def digits_cnn_bn_nesterov() -> Task:
    train, val = data.split(data.digits_images(), 397)
    return Task(model=lambda: DigitsCNN(16), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=_sgdm(nesterov=True), batch_size=32, name="digits_cnn_bn_nesterov", defaults=_defaults(200))


def digits_cnn_adamw() -> Task:
    train, val = data.split(data.digits_images(), 397, seed=2)
    return Task(model=lambda: DigitsCNN(12, bn=False), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=_adamw(wd=0.05), batch_size=64, name="digits_cnn_adamw", defaults=_defaults(150))


def photo_patches_cnn_adam() -> Task:
    train, val = data.split(data.photo_patches(4096 + 512), 512)
    return Task(model=lambda: GratingCNN(12), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-4), batch_size=32,
                name="photo_patches_cnn_adam", defaults=_defaults(250))


# --- character LMs (real text) -------------------------------------------------------------------


def gpt_docs_adamw() -> Task:
    train, val = data.char_windows(data.docs_text(), 32, 384)
    return Task(model=lambda: TinyGPT(V, 64, 2, 4, 32), train_data=train, val_data=val, loss=lm_loss,
                optimizer=_adamw(wd=0.1, betas=(0.9, 0.95)), batch_size=32, name="gpt_docs_adamw",
                defaults=_defaults(200))


def lstm_torchsrc_adam() -> Task:
    train, val = data.char_windows(data.torch_source(2_000_000), 48, 256, max_windows=20000)
    return Task(model=lambda: CharLSTM(), train_data=train, val_data=val, loss=lm_loss,
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3), batch_size=16, name="lstm_torchsrc_adam",
                defaults=_defaults(250))


def lstm_docs_adagrad() -> Task:
    train, val = data.char_windows(data.docs_text(), 48, 256, seed=9)
    return Task(model=lambda: CharLSTM(), train_data=train, val_data=val, loss=lm_loss,
                optimizer=lambda p: torch.optim.Adagrad(p, lr=1e-2), batch_size=32, name="lstm_docs_adagrad",
                defaults=_defaults(200))


# --- regression (real) ---------------------------------------------------------------------------


def photo_pixels_mse_adam() -> Task:
    train, val = data.split(data.photo_pixels(8192 + 1024), 1024)
    return Task(model=lambda: mlp(72, 128, 2, 3), train_data=train, val_data=val, loss=nn.MSELoss(),
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3), batch_size=64, name="photo_pixels_mse_adam",
                defaults=_defaults(200))


def photo_pixels_huber_sgdm() -> Task:
    train, val = data.split(data.photo_pixels(8192 + 1024, seed=8), 1024)
    return Task(model=lambda: mlp(72, 96, 2, 3), train_data=train, val_data=val, loss=nn.HuberLoss(delta=0.5),
                optimizer=_sgdm(wd=0.0), batch_size=32, name="photo_pixels_huber_sgdm", defaults=_defaults(300))


def diabetes_mse_adamw() -> Task:
    train, val = data.split(data.table("diabetes", regression=True), 142)
    return Task(model=lambda: mlp(10, 64, 2, 1), train_data=train, val_data=val, loss=nn.MSELoss(),
                optimizer=_adamw(), batch_size=16, name="diabetes_mse_adamw", defaults=_defaults(200))


# --- small data: under 1,000 samples, the finder is given no validation set ------------------------
# The task's val_data is the held-out test set the ground truth is scored on; the LR harness strips it
# before calling lr_find (Entry.finder_val=False), as a user with a few hundred samples would call it.


def wine_mlp_adamw() -> Task:
    train, test = data.split(data.table("wine"), 58)
    return Task(model=lambda: mlp(13, 64, 2, 3), train_data=train, val_data=test, loss=nn.CrossEntropyLoss(),
                optimizer=_adamw(), batch_size=16, name="wine_mlp_adamw", defaults=_defaults(150))


def iris_mlp_sgdm() -> Task:
    train, test = data.split(data.table("iris"), 50)
    return Task(model=lambda: mlp(4, 32, 2, 3), train_data=train, val_data=test, loss=nn.CrossEntropyLoss(),
                optimizer=_sgdm(wd=0.0), batch_size=16, name="iris_mlp_sgdm", defaults=_defaults(150))


def cancer_mlp_adam() -> Task:
    train, test = data.split(data.table("breast_cancer"), 269, seed=3)
    return Task(model=lambda: mlp(30, 64, 2, 2), train_data=train, val_data=test, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-4), batch_size=32,
                name="cancer_mlp_adam", defaults=_defaults(150))


def digits_small_cnn_adamw() -> Task:
    train, test = data.split(data.digits_images(), 1497, seed=4)  # 300 training images
    return Task(model=lambda: DigitsCNN(12), train_data=train, val_data=test, loss=nn.CrossEntropyLoss(),
                optimizer=_adamw(), batch_size=32, name="digits_small_cnn_adamw", defaults=_defaults(150))


# --- long horizons on fresh data: thousands of updates, each sample seen about once ---------------


def gpt_torchsrc_long() -> Task:
    train, val = data.char_windows(data.torch_source(), 32, 512, seed=11, max_windows=70000)
    return Task(model=lambda: TinyGPT(V, 48, 1, 4, 32), train_data=train, val_data=val, loss=lm_loss,
                optimizer=_adamw(wd=0.1, betas=(0.9, 0.95)), batch_size=32, name="gpt_torchsrc_long",
                defaults=_defaults(2000))


def photo_pixels_long_sgdm() -> Task:
    train, val = data.split(data.photo_pixels(200_000 + 2048, seed=9), 2048)
    return Task(model=lambda: mlp(72, 64, 2, 3), train_data=train, val_data=val, loss=nn.MSELoss(),
                optimizer=_sgdm(wd=0.0), batch_size=64, name="photo_pixels_long_sgdm", defaults=_defaults(3000))


# --- fine-tuning pretrained models (real data; the backbones pretrained once here, cached) ---------


def _digits_low() -> dict[str, torch.Tensor]:
    """A BatchNorm CNN pretrained on the digits 0-4."""
    imgs = data.digits_images()
    low = imgs.tensors[1] < 5
    train, val = data.split(TensorDataset(imgs.tensors[0][low], imgs.tensors[1][low]), 100)
    task = Task(model=lambda: DigitsCNN(16), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=_adamw(), batch_size=32, name="pretrain_digits_low", defaults=_defaults(300))
    return pretrained("digitscnn16-low-v1", task, lr=3e-3, steps=300)


def _digits_high(seed: int) -> tuple[TensorDataset, TensorDataset]:
    imgs = data.digits_images()
    high = imgs.tensors[1] >= 5
    return data.split(TensorDataset(imgs.tensors[0][high], imgs.tensors[1][high] - 5), 400, seed=seed)


def digits_head_cnn_adam() -> Task:
    """A new head on the frozen CNN pretrained on 0-4, for the digits 5-9."""
    state = _digits_low()
    train, val = _digits_high(0)

    def model() -> nn.Module:
        base = DigitsCNN(16)
        base.load_state_dict(state)
        return FrozenFeatures(base.features, nn.Linear(base.head.in_features, 5))

    return Task(model=model, train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3), batch_size=32, name="digits_head_cnn_adam",
                defaults=_defaults(120))


def digits_ft_cnn_sgdm() -> Task:
    """Every weight of the CNN pretrained on 0-4 tuned for 5-9 (a fresh head), SGD momentum."""
    state = {k: v for k, v in _digits_low().items() if not k.startswith("head.")}
    train, val = _digits_high(1)

    def model() -> nn.Module:
        m = DigitsCNN(16, classes=5)
        m.load_state_dict(state, strict=False)
        return m

    return Task(model=model, train_data=train, val_data=val, loss=nn.CrossEntropyLoss(), optimizer=_sgdm(),
                batch_size=32, name="digits_ft_cnn_sgdm", defaults=_defaults(150))


def _gpt_code() -> dict[str, torch.Tensor]:
    from benchmarks.lr_tasks import _gpt_pretrained

    return _gpt_pretrained()  # TinyGPT(64, 2 layers) pretrained on standard-library source


def gpt_docs_full_ft() -> Task:
    """The GPT pretrained on source code, every weight tuned on English documentation."""
    state = _gpt_code()
    train, val = data.char_windows(data.docs_text(), 32, 384, seed=5, max_windows=4000)

    def model() -> nn.Module:
        m = TinyGPT(V, 64, 2, 4, 32)
        m.load_state_dict(state)
        return m

    return Task(model=model, train_data=train, val_data=val, loss=lm_loss, optimizer=_adamw(wd=0.01),
                batch_size=32, name="gpt_docs_full_ft", defaults=_defaults(150))


def gpt_docs_lora() -> Task:
    """Rank-8 LoRA on the GPT pretrained on source code, tuned on English documentation."""
    state = _gpt_code()
    train, val = data.char_windows(data.docs_text(), 32, 384, seed=6, max_windows=4000)

    def model() -> nn.Module:
        m = TinyGPT(V, 64, 2, 4, 32)
        m.load_state_dict(state)
        return add_lora(m, rank=8, alpha=16.0)

    return Task(model=model, train_data=train, val_data=val, loss=lm_loss, optimizer=_adamw(wd=0.0),
                batch_size=32, name="gpt_docs_lora", defaults=_defaults(150))


# --- Hugging Face-style dict batches -------------------------------------------------------------


def hf_gpt_docs() -> Task:
    """Dict batches {input_ids, labels}; the model computes its own loss (no loss= given)."""
    train, val = data.char_windows(data.docs_text(), 32, 384, seed=7)
    return Task(model=lambda: DictGPT(64, 2), train_data=_as_dicts(train, "input_ids", "labels"),
                val_data=_as_dicts(val, "input_ids", "labels"), optimizer=_adamw(wd=0.1), batch_size=32,
                name="hf_gpt_docs", defaults=_defaults(200))


def hf_lstm_torchsrc() -> Task:
    train, val = data.char_windows(data.torch_source(2_000_000), 48, 256, seed=8, max_windows=20000)
    return Task(model=lambda: DictLSTM(), train_data=_as_dicts(train, "input_ids", "labels"),
                val_data=_as_dicts(val, "input_ids", "labels"),
                optimizer=lambda p: torch.optim.RMSprop(p, lr=1e-3), batch_size=32, name="hf_lstm_torchsrc",
                defaults=_defaults(200))


class DictClassifier(nn.Module):
    """An image classifier called as ``model(pixel_values=...)``; the Task's loss takes its logits."""

    def __init__(self) -> None:
        super().__init__()
        self.net = DigitsCNN(12)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.net(pixel_values)


def hf_digits_cls() -> Task:
    """Dict batches {pixel_values, labels} with loss= given: the labels are held back for it."""
    train, val = data.split(data.digits_images(), 397, seed=6)
    return Task(model=DictClassifier, train_data=_as_dicts(train, "pixel_values", "labels"),
                val_data=_as_dicts(val, "pixel_values", "labels"), loss=nn.CrossEntropyLoss(),
                optimizer=_adamw(), batch_size=32, name="hf_digits_cls", defaults=_defaults(150))


# --- constant LR, no warmup (Lightning's default without a scheduler) ------------------------------


def const_digits_mlp_adam() -> Task:
    train, val = data.split(data.table("digits"), 397, seed=7)
    return Task(model=lambda: mlp(64, 128, 2, 10), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3), batch_size=32, name="const_digits_mlp_adam",
                defaults=_constant(200))


def const_gpt_docs_adamw() -> Task:
    train, val = data.char_windows(data.docs_text(), 32, 384, seed=8)
    return Task(model=lambda: TinyGPT(V, 64, 2, 4, 32), train_data=train, val_data=val, loss=lm_loss,
                optimizer=_adamw(wd=0.01), batch_size=32, name="const_gpt_docs_adamw", defaults=_constant(200))


def const_digits_cnn_sgdm() -> Task:
    train, val = data.split(data.digits_images(), 397, seed=8)
    return Task(model=lambda: DigitsCNN(16), train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
                optimizer=_sgdm(), batch_size=32, name="const_digits_cnn_sgdm", defaults=_constant(200))


def const_pixels_sgdm() -> Task:
    train, val = data.split(data.photo_pixels(8192 + 1024, seed=10), 1024)
    return Task(model=lambda: mlp(72, 128, 2, 3), train_data=train, val_data=val, loss=nn.MSELoss(),
                optimizer=_sgdm(wd=0.0), batch_size=32, name="const_pixels_sgdm", defaults=_constant(250))

