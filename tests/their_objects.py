"""Tiny seeded Hugging Face and Lightning objects, as users hold them, and the same problems as tunekit Tasks.

Built from configs on data made here: nothing is downloaded. Each family gives ``their(seed)`` (the
user's objects: a Trainer, or a LightningRun) and ``task()`` (the same model, data, optimizer and
recipe as a tunekit.Task), so a test can check that both give the same answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tunekit

VOCAB, SEQ, CLASSES = 48, 16, 3


def _quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()


def token_data(n: int, seed: int, labels: str = "lm") -> list[dict[str, torch.Tensor]]:
    """Token sequences with a pattern to learn: LM labels (the inputs), or a class (the first token mod 3)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        ids[1::2] = (ids[0::2] + 1) % VOCAB  # every second token follows from the one before
        label = ids.clone() if labels == "lm" else torch.tensor(int(ids[0]) % CLASSES)
        out.append({"input_ids": ids, "labels": label})
    return out


def gpt2_model() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    _quiet_transformers()
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=SEQ,
                                      bos_token_id=0, eos_token_id=0, use_cache=False))  # as a Trainer sets it


def bert_model() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    _quiet_transformers()
    return BertForSequenceClassification(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=64,
                                                    max_position_embeddings=SEQ, num_labels=CLASSES))


def vit_model() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    _quiet_transformers()
    return ViTForImageClassification(ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32,
                                               num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                               hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                                               num_labels=CLASSES))


def image_data(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, 16, 16, generator=g)
    y = (x[:, 0].mean((1, 2)) > 0).long()
    return [{"pixel_values": x[i], "labels": y[i]} for i in range(n)]


HF_FAMILIES: dict[str, tuple[Callable[[], nn.Module], str]] = {"gpt2": (gpt2_model, "lm"), "bert": (bert_model, "class")}


def hf_args(tmp: Any, **over: Any) -> Any:
    from transformers import TrainingArguments

    base = dict(output_dir=str(tmp), per_device_train_batch_size=8, per_device_eval_batch_size=16, learning_rate=2e-3,
                warmup_steps=2, lr_scheduler_type="cosine", max_grad_norm=0.5, max_steps=24, report_to=[],
                use_cpu=True, save_strategy="no", disable_tqdm=True, log_level="error", logging_strategy="no")
    return TrainingArguments(**{**base, **over})


def hf_trainer(family: str, tmp: Any, seed: int = 0, *, model_init: bool = False, **over: Any) -> Any:
    """A Trainer over the family's tiny model (weights drawn from ``seed``, as Task.make_model(seed) draws them)."""
    from transformers import Trainer

    make, labels = HF_FAMILIES[family] if family in HF_FAMILIES else (vit_model, "image")
    train = token_data(96, 1, labels) if labels != "image" else image_data(96, 1)
    evals = token_data(32, 2, labels) if labels != "image" else image_data(32, 2)
    if model_init:
        return Trainer(model_init=make, args=hf_args(tmp, **over), train_dataset=train, eval_dataset=evals)
    torch.manual_seed(seed)
    model = make()
    return Trainer(model=model, args=hf_args(tmp, **over), train_dataset=train, eval_dataset=evals)


def hf_task(family: str) -> tunekit.Task:
    """The same problem as :func:`hf_trainer` written as a Task by hand: the Trainer's data order (a
    generator seeded by args.seed, 42), its optimizer (fused AdamW) and its recipe (its warmup a fraction of the run)."""
    from transformers import default_data_collator

    make, labels = HF_FAMILIES[family]
    train = token_data(96, 1, labels)
    loader = DataLoader(train, batch_size=8, shuffle=True, collate_fn=default_data_collator,
                        generator=torch.Generator().manual_seed(42))
    val = DataLoader(token_data(32, 2, labels), batch_size=16, collate_fn=default_data_collator)
    return tunekit.Task(model=make, train_data=loader, val_data=val, batch_size=8, name=type(make()).__name__,
                        optimizer=hf_style_adamw(make()),
                        defaults={"lr": 2e-3, "max_steps": 24, "warmup": 2 / 24, "schedule": "cosine", "min_lr_ratio": 0.0,
                                  "accumulation_steps": 1, "clip_grad_norm": 0.5})


def hf_style_adamw(template: nn.Module, lr: float = 2e-3, weight_decay: float = 0.0) -> Callable[[Any], Any]:
    """Fused AdamW over two groups, as the Trainer builds it: biases and LayerNorms do not decay (fused
    AdamW's numbers depend on the grouping, so the same problem needs the same groups)."""
    free = {f"{m}.{n}".lstrip(".") for m, mod in template.named_modules() for n, _ in mod.named_parameters(recurse=False)
            if isinstance(mod, nn.LayerNorm) or n == "bias"}
    names = [n for n, p in template.named_parameters() if p.requires_grad]

    def build(params: Any) -> torch.optim.Optimizer:
        named = list(zip(names, params))
        return torch.optim.AdamW([{"params": [p for n, p in named if n not in free], "weight_decay": weight_decay},
                                  {"params": [p for n, p in named if n in free], "weight_decay": 0.0}],
                                 lr=lr, fused=True)
    return build


def lightning_classes() -> tuple[type, type]:
    """A tiny LightningModule (an MLP classifier that logs val_loss) and its DataModule."""
    import lightning as L

    class TinyLit(L.LightningModule):
        def __init__(self, lr: float = 1e-2, hidden: int = 32) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, CLASSES))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.cross_entropy(self(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self(x), y))

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)

    class TinyData(L.LightningDataModule):
        def setup(self, stage: str) -> None:
            self.train, self.val = lit_data(256, 1), lit_data(64, 2)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.train, batch_size=16, shuffle=True)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(self.val, batch_size=32)

    return TinyLit, TinyData


def adam_lightning_class() -> type:
    """TinyLit with the recipe of many modules: Adam, ``lr=1e-3`` and ``weight_decay=0.0`` as hyperparameters."""
    TinyLit, _ = lightning_classes()

    class AdamLit(TinyLit):  # type: ignore[misc, valid-type]
        def __init__(self, lr: float = 1e-3, hidden: int = 32, weight_decay: float = 0.0) -> None:
            super().__init__(lr, hidden)
            self.save_hyperparameters()

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)

    return AdamLit


def lit_data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long())


def lightning_trainer(tmp: Any, **over: Any) -> Any:
    import lightning as L

    base = dict(max_steps=24, gradient_clip_val=0.5, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False, default_root_dir=str(tmp), accelerator="cpu")
    return L.Trainer(**{**base, **over})


def lightning_run(tmp: Any, seed: int = 0, *, factory: bool = False) -> Any:
    from tunekit.integrations import LightningRun

    TinyLit, TinyData = lightning_classes()
    torch.manual_seed(seed)
    return LightningRun(TinyLit if factory else TinyLit(), TinyData(), lightning_trainer(tmp))


def lightning_task() -> tunekit.Task:
    TinyLit, _ = lightning_classes()
    loader = DataLoader(lit_data(256, 1), batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0))
    return tunekit.Task(model=TinyLit, train_data=loader, val_data=DataLoader(lit_data(64, 2), batch_size=32),
                        compute_loss=lambda m, b: m.training_step(b, 0), batch_size=16, name="TinyLit",
                        optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2),
                        defaults={"lr": 1e-2, "max_steps": 24, "warmup": 0, "schedule": "constant", "min_lr_ratio": 1.0,
                                  "accumulation_steps": 1, "clip_grad_norm": 0.5})


def tensors_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer, copied, with the module's modes."""
    out = {f"p:{k}": v.detach().clone() for k, v in model.named_parameters()}
    out.update({f"b:{k}": v.detach().clone() for k, v in model.named_buffers()})
    return out


def unchanged(model: nn.Module, before: dict[str, torch.Tensor]) -> bool:
    now = tensors_of(model)
    return now.keys() == before.keys() and all(torch.equal(now[k], before[k]) for k in before)


def replace_args(trainer: Any, **changes: Any) -> Any:
    return dataclasses.replace(trainer.args, **changes)
