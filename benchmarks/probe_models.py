"""The models of benchmarks/probe_accuracy.py, as tasks that a fresh subprocess can load by spec.

Each is small enough that a step at the batch that fills 512 MiB takes a few seconds on
one core, and each has a way for memory to escape a trace or a small-batch calibration:

* ``mlp``: wide linear layers, whose matmuls run at large batches (MKL's own buffers);
* ``lstm``: a 2-layer LSTM classifier, whose fused kernel keeps a workspace that grows with
  the batch (bf16 autocast is the case the issue found 4.4x under-predicted);
* ``gpt``: a causal Transformer fed dict batches ({"input_ids", "labels"}) and returning an
  object with ``.loss``, as a Hugging Face model does; attention through
  scaled_dot_product_attention;
* ``deep`` / ``deep_ckpt``: a deep pre-norm residual MLP, without and with activation
  checkpointing (the recomputation lives in backward, not forward).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset, TensorDataset

import tunekit

from .search_tasks import Block  # the same pre-norm Transformer block


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def mlp_task(config: dict | None = None) -> tunekit.Task:
    g = _gen()
    x = torch.randn(24576, 784, generator=g)
    y = torch.randint(0, 10, (24576,), generator=g)
    return tunekit.Task(
        model=lambda: nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)),
        train_data=TensorDataset(x, y), loss=nn.CrossEntropyLoss(), batch_size=64, name="mlp")


class LSTMClassifier(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 64, hidden: int = 128, classes: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x))
        return self.head(out[:, -1])


def lstm_task(config: dict | None = None) -> tunekit.Task:
    g = _gen()
    x = torch.randint(0, 64, (8192, 32), generator=g)
    y = torch.randint(0, 8, (8192,), generator=g)
    return tunekit.Task(model=LSTMClassifier, train_data=TensorDataset(x, y), loss=nn.CrossEntropyLoss(),
                        batch_size=64, name="lstm")


class TinyGPT(nn.Module):
    """input_ids (and labels) in, an object with .loss and .logits out, as a Hugging Face causal LM."""

    def __init__(self, vocab: int = 96, dim: int = 64, heads: int = 4, layers: int = 2, context: int = 64) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> SimpleNamespace:
        x = self.tok(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        loss = None if labels is None else F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        return SimpleNamespace(loss=loss, logits=logits)


class TokenDicts(Dataset):
    """Dict samples; ``__getitems__`` hands the DataLoader a whole collated batch (no per-sample collation)."""

    def __init__(self, ids: torch.Tensor) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

    def __getitems__(self, idx: list[int]) -> dict[str, torch.Tensor]:
        ids = self.ids[torch.as_tensor(idx)]
        return {"input_ids": ids, "labels": ids.clone()}


def _as_is(batch: Any) -> Any:
    return batch


def gpt_task(config: dict | None = None) -> tunekit.Task:
    ids = torch.randint(0, 96, (8192, 64), generator=_gen())
    loader = DataLoader(TokenDicts(ids), batch_size=16, collate_fn=_as_is)
    return tunekit.Task(model=TinyGPT, train_data=loader, batch_size=16, name="gpt")


class DeepMLP(nn.Module):
    """Pre-norm residual blocks; with ``ckpt`` each block is recomputed in backward."""

    def __init__(self, dim: int = 256, depth: int = 12, ckpt: bool = False) -> None:
        super().__init__()
        self.ckpt = ckpt
        self.inp = nn.Linear(64, dim)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
                                    for _ in range(depth))
        self.out = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = x + (checkpoint(block, x, use_reentrant=False) if self.ckpt and self.training else block(x))
        return self.out(x)


def _deep(ckpt: bool) -> tunekit.Task:
    g = _gen()
    x = torch.randn(32768, 64, generator=g)
    y = torch.randint(0, 10, (32768,), generator=g)
    return tunekit.Task(model=lambda: DeepMLP(ckpt=ckpt), train_data=TensorDataset(x, y), loss=nn.CrossEntropyLoss(),
                        batch_size=64, name="deep_ckpt" if ckpt else "deep")


def deep_task(config: dict | None = None) -> tunekit.Task:
    return _deep(False)


def deep_ckpt_task(config: dict | None = None) -> tunekit.Task:
    return _deep(True)


def cnn_task(config: dict | None = None) -> tunekit.Task:
    """The built-in `shapes` CNN, on more samples so that the batch that fills the budget exists."""
    from tunekit.builtin.shapes import shapes_task

    return shapes_task({"n_train": 16384})


# The corpus's models (benchmarks/corpus), on their own data repeated to CORPUS_SAMPLES samples, so that
# the batch that fills a budget exists: a step's memory depends on the shapes, not on what the samples say.
CORPUS_SAMPLES = 65536


def corpus_task(name: str, samples: int = CORPUS_SAMPLES) -> tunekit.Task:
    """The corpus task ``name`` with its training data repeated (in order) to ``samples`` samples."""
    import dataclasses

    from torch.utils.data import Subset

    from benchmarks.corpus import build

    task = build(name)
    data = task.train_data.dataset if isinstance(task.train_data, DataLoader) else task.train_data
    index = torch.arange(samples) % len(data)
    return dataclasses.replace(task, train_data=Subset(data, index.tolist()), name=f"{name}_x{samples}")


def __getattr__(attr: str) -> Any:
    """``corpus_<name>_task``: :func:`corpus_task` of the corpus entry ``name``, as a task spec names it."""
    if attr.startswith("corpus_") and attr.endswith("_task"):
        name = attr[len("corpus_"):-len("_task")]

        def make(config: dict | None = None) -> tunekit.Task:
            return corpus_task(name)

        make.__name__ = attr
        return make
    raise AttributeError(attr)


# Users' objects, probed as users hold them (tunekit.probe(trainer), tunekit.probe(module)); the truth for them is
# measured with their own training step (benchmarks/probe_accuracy.py --their-objects).
THEIR_SAMPLES = 24576


def hf_gpt2_trainer_task(config: dict | None = None) -> Any:
    """A Hugging Face Trainer of a 2-layer GPT-2 (width 64, 64-token sequences, a 96-token vocabulary), AdamW and
    a cosine schedule as TrainingArguments give them, on dict samples with labels."""
    import tempfile

    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    from transformers.utils import logging

    logging.set_verbosity_error()
    ids = torch.randint(0, 96, (THEIR_SAMPLES, 64), generator=_gen())
    data = [{"input_ids": row, "labels": row} for row in ids]
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=96, n_positions=64, bos_token_id=0,
                                       eos_token_id=0, use_cache=False))
    args = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="tk-bench-hf-"), per_device_train_batch_size=16,
                             learning_rate=1e-3, warmup_steps=10, lr_scheduler_type="cosine", max_steps=200,
                             report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True, log_level="error",
                             logging_strategy="no")
    return Trainer(model=model, args=args, train_dataset=data)


def lightning_mlp_task(config: dict | None = None) -> Any:
    """A LightningModule: the wide MLP of :func:`mlp_task` with its own ``training_step`` (which logs),
    ``configure_optimizers`` (AdamW) and ``train_dataloader``."""
    import lightning as L

    g = _gen()
    x = torch.randn(THEIR_SAMPLES, 784, generator=g)
    y = torch.randint(0, 10, (THEIR_SAMPLES,), generator=g)

    class WideMLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                     nn.Linear(1024, 10))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            inputs, labels = batch
            loss = F.cross_entropy(self.net(inputs), labels)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)

    torch.manual_seed(0)
    return WideMLP()
