"""The benchmark task corpus: every benchmark draws its tasks from here.

Each :class:`Entry` is a ``tunekit.Task`` factory with what the protocol needs to know of it: its
family (the unit of leave-one-family-out validation), the data it trains on and whether that data is
real, its optimizer, batch, planned run and schedule, and where its LR grid starts.

    python -m benchmarks.corpus --list          # one line a task
    python -m benchmarks.corpus --families      # the families and their tasks

Families: ``tabular`` (MLPs on tables), ``cnn`` (small CNNs on images), ``lm`` (character LMs:
GPT-2-style and LSTM), ``regression`` (MSE and Huber), ``small-data`` (under 1,000 samples; the LR
finder gets no validation set), ``long-horizon`` (thousands of updates on data seen about once),
``finetune`` (a pretrained backbone: frozen with a new head, LoRA, or every weight), ``dict-batch``
(Hugging Face-style dict batches, with and without the model's own loss), ``constant-lr`` (a constant
LR and no warmup: Lightning's default without a scheduler).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from tunekit import Task

__all__ = ["Entry", "CORPUS", "FAMILIES", "families", "entry", "build", "pick"]


@dataclass(frozen=True)
class Entry:
    """One task of the corpus and what the protocol needs to know of it."""

    name: str
    family: str
    data: str  # what it trains on, in words
    real: bool  # real data (False: a synthetic teacher or generator)
    optimizer: str  # adamw | adam | adam-l2 | sgd-momentum | sgd-nesterov | rmsprop | adagrad
    batch: int
    run_steps: int  # the planned run's optimizer updates
    schedule: str  # warmup-cosine | constant
    make: Callable[[], Task] = field(repr=False, compare=False)
    grid: tuple[float, float] = (-4.0, 0.0)  # log10 of the first grid's lowest and highest LR
    finder_val: bool = True  # False: the LR finder is called without validation data (small data)

    @property
    def family_text(self) -> str:
        return f"{self.family} ({'real' if self.real else 'synthetic'} {self.data})"


def _entries() -> list[Entry]:
    from benchmarks import lr_tasks as old
    from benchmarks import search_tasks as st
    from benchmarks.corpus import tasks as t

    W, C = "warmup-cosine", "constant"
    return [
        # tabular
        Entry("digits_mlp_adamw", "tabular", "sklearn digits as 64 features", True, "adamw", 32, 200, W, t.digits_mlp_adamw),
        Entry("digits_mlp_sgdm", "tabular", "sklearn digits as 64 features", True, "sgd-momentum", 16, 300, W, t.digits_mlp_sgdm, (-3, 1)),
        Entry("cancer_mlp_rmsprop", "tabular", "sklearn breast cancer", True, "rmsprop", 32, 150, W, t.cancer_mlp_rmsprop, (-4.5, -0.5)),
        Entry("mlp_sgdm_ce", "tabular", "noisy teacher classes", False, "sgd-momentum", 64, 300, W, old.mlp_sgdm_ce, (-3, 1)),
        Entry("mlp_bce_adam", "tabular", "teacher multilabel", False, "adam", 256, 100, W, old.mlp_bce_adam),
        # cnn
        Entry("digits_cnn_bn_nesterov", "cnn", "sklearn digits 8x8", True, "sgd-nesterov", 32, 200, W, t.digits_cnn_bn_nesterov, (-3, 1)),
        Entry("digits_cnn_adamw", "cnn", "sklearn digits 8x8", True, "adamw", 64, 150, W, t.digits_cnn_adamw),
        Entry("photo_patches_cnn_adam", "cnn", "patches of sklearn's sample photos", True, "adam-l2", 32, 250, W, t.photo_patches_cnn_adam),
        Entry("cnn_bn_nesterov_ls", "cnn", "noisy gratings", False, "sgd-nesterov", 32, 200, W, old.cnn_bn_nesterov_ls, (-3, 1)),
        # character LMs
        Entry("gpt_docs_adamw", "lm", "Python's documentation prose", True, "adamw", 32, 200, W, t.gpt_docs_adamw),
        Entry("lstm_torchsrc_adam", "lm", "PyTorch's source code", True, "adam", 16, 250, W, t.lstm_torchsrc_adam),
        Entry("lstm_docs_adagrad", "lm", "Python's documentation prose", True, "adagrad", 32, 200, W, t.lstm_docs_adagrad, (-3, 1)),
        Entry("gpt2_charlm", "lm", "standard-library source", True, "adamw", 32, 150, W, old.gpt2_charlm),
        Entry("tiny_lm", "lm", "standard-library source", True, "adamw", 32, 150, W, lambda: st.tiny_lm(None)),
        # regression
        Entry("photo_pixels_mse_adam", "regression", "sample photos: a pixel from its neighbours", True, "adam", 64, 200, W, t.photo_pixels_mse_adam),
        Entry("photo_pixels_huber_sgdm", "regression", "sample photos: a pixel from its neighbours", True, "sgd-momentum", 32, 300, W, t.photo_pixels_huber_sgdm, (-3, 1)),
        Entry("diabetes_mse_adamw", "regression", "sklearn diabetes", True, "adamw", 16, 200, W, t.diabetes_mse_adamw),
        Entry("mlp_huber_sgdm", "regression", "heavy-tailed teacher", False, "sgd-momentum", 16, 400, W, old.mlp_huber_sgdm, (-3, 1)),
        # small data, no validation set for the finder
        Entry("wine_mlp_adamw", "small-data", "sklearn wine, 120 samples", True, "adamw", 16, 150, W, t.wine_mlp_adamw, finder_val=False),
        Entry("iris_mlp_sgdm", "small-data", "sklearn iris, 100 samples", True, "sgd-momentum", 16, 150, W, t.iris_mlp_sgdm, (-3, 1), finder_val=False),
        Entry("cancer_mlp_adam", "small-data", "sklearn breast cancer, 300 samples", True, "adam-l2", 32, 150, W, t.cancer_mlp_adam, finder_val=False),
        Entry("digits_small_cnn_adamw", "small-data", "sklearn digits, 300 images", True, "adamw", 32, 150, W, t.digits_small_cnn_adamw, finder_val=False),
        # long horizons on fresh data
        Entry("gpt_torchsrc_long", "long-horizon", "PyTorch's source code, 2.2M windows' chars", True, "adamw", 32, 2000, W, t.gpt_torchsrc_long),
        Entry("photo_pixels_long_sgdm", "long-horizon", "sample photos, 200k pixels", True, "sgd-momentum", 64, 3000, W, t.photo_pixels_long_sgdm, (-3, 1)),
        Entry("long_adam", "long-horizon", "teacher classes, 65k samples", False, "adam", 32, 2400, W, lambda: st.long_adam(None)),
        # fine-tuning
        Entry("digits_head_cnn_adam", "finetune", "sklearn digits 5-9, CNN pretrained on 0-4, frozen", True, "adam", 32, 120, W, t.digits_head_cnn_adam),
        Entry("digits_ft_cnn_sgdm", "finetune", "sklearn digits 5-9, CNN pretrained on 0-4, all weights", True, "sgd-momentum", 32, 150, W, t.digits_ft_cnn_sgdm, (-4, 0)),
        Entry("gpt_docs_full_ft", "finetune", "documentation prose, GPT pretrained on source, all weights", True, "adamw", 32, 150, W, t.gpt_docs_full_ft, (-5, -1)),
        Entry("gpt_docs_lora", "finetune", "documentation prose, GPT pretrained on source, LoRA", True, "adamw", 32, 150, W, t.gpt_docs_lora),
        Entry("lora_gpt_adamw", "finetune", "stdlib source, GPT pretrained on other stdlib source, LoRA", True, "adamw", 32, 150, W, old.lora_gpt_adamw),
        Entry("ft_mlp_adamw", "finetune", "shifted teacher, MLP pretrained on the teacher", False, "adamw", 32, 150, W, old.ft_mlp_adamw, (-5, -1)),
        # Hugging Face-style dict batches
        Entry("hf_gpt_docs", "dict-batch", "documentation prose, model's own .loss", True, "adamw", 32, 200, W, t.hf_gpt_docs),
        Entry("hf_lstm_torchsrc", "dict-batch", "PyTorch's source, model's own .loss", True, "rmsprop", 32, 200, W, t.hf_lstm_torchsrc, (-4.5, -0.5)),
        Entry("hf_digits_cls", "dict-batch", "sklearn digits as pixel_values, loss= given", True, "adamw", 32, 150, W, t.hf_digits_cls),
        # constant LR, no warmup
        Entry("const_digits_mlp_adam", "constant-lr", "sklearn digits as 64 features", True, "adam", 32, 200, C, t.const_digits_mlp_adam),
        Entry("const_gpt_docs_adamw", "constant-lr", "documentation prose", True, "adamw", 32, 200, C, t.const_gpt_docs_adamw),
        Entry("const_digits_cnn_sgdm", "constant-lr", "sklearn digits 8x8", True, "sgd-momentum", 32, 200, C, t.const_digits_cnn_sgdm, (-3, 1)),
        Entry("const_pixels_sgdm", "constant-lr", "sample photos: a pixel from its neighbours", True, "sgd-momentum", 32, 250, C, t.const_pixels_sgdm, (-3, 1)),
    ]


CORPUS: dict[str, Entry] = {e.name: e for e in _entries()}
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(e.family for e in CORPUS.values()))


def families() -> dict[str, list[Entry]]:
    """The corpus's entries grouped by family, in corpus order."""
    return {f: [e for e in CORPUS.values() if e.family == f] for f in FAMILIES}


def entry(name: str) -> Entry:
    if name not in CORPUS:
        raise SystemExit(f"unknown corpus task {name!r}: see `python -m benchmarks.corpus --list`")
    return CORPUS[name]


def build(name: str) -> Task:
    """A fresh Task of the corpus entry ``name``."""
    return entry(name).make()


def pick(names: str) -> list[str]:
    """The corpus tasks a comma-separated ``--tasks`` value names; an unknown one is one line, exit 2."""
    picked = [n.strip() for n in names.split(",") if n.strip()]
    bad = [n for n in picked if n not in CORPUS]
    if bad or not picked:
        print(f"unknown corpus task(s) {', '.join(bad) or repr(names)}: see `python -m benchmarks.corpus --list`",
              file=sys.stderr)
        raise SystemExit(2)
    return picked
