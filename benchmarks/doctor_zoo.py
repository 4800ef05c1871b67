"""A zoo of broken training set-ups, each with one known fault, and healthy ones: does `tunekit.doctor`
find each fault with the check meant for it, and leave the healthy ones alone?

    python -m benchmarks.doctor_zoo            # every set-up; the last line is the score
    python -m benchmarks.doctor_zoo --quick    # three set-ups (two faults, one healthy): a smoke run

The report goes to benchmarks/data/doctor_zoo_report.txt (a quick run's to a temporary folder).

For each set-up it prints the expected finding and what doctor reported (warnings and failures).
A fault counts as found when its check reports it (fail, or warn for the soft ones); a healthy
set-up should get no failure, and all of them together at most one warning.

transformers is not installed here, so the Hugging Face-style healthy model is a stand-in: a small
GPT-like nn.Module that takes dict batches (input_ids, labels) and returns an object with .loss and
.logits, as a transformers causal LM does.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


from tunekit import PlannedRun, StepSettings  # noqa: E402
from tunekit.builtin import builtin_task  # noqa: E402
from tunekit.builtin.shapes import make_shapes  # noqa: E402
from tunekit.checks import doctor  # noqa: E402
from tunekit.inputs.data import BatchStream  # noqa: E402
from tunekit.probes.resolve import resolve_inputs  # noqa: E402
from tunekit.training.step import TrainStep  # noqa: E402

from benchmarks._common import recorded  # noqa: E402
from benchmarks.harness import report  # noqa: E402

DIM, CLASSES, N = 16, 4, 512


def blobs(n: int = N, seed: int = 0, classes: int = CLASSES) -> tuple[torch.Tensor, torch.Tensor]:
    """Separable classes in DIM standardised features."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, DIM, generator=g)
    w = torch.randn(DIM, classes, generator=torch.Generator().manual_seed(99))
    return x, (x @ w).argmax(1)


def data(seed: int = 0, **kw: Any) -> TensorDataset:
    return TensorDataset(*blobs(seed=seed, **kw))


def mlp(out: int = CLASSES, hidden: int = 64) -> nn.Sequential:
    return nn.Sequential(nn.Linear(DIM, hidden), nn.ReLU(), nn.Linear(hidden, out))


def classify(model: nn.Module, train: Any = None, val: Any = None, loss: Any = None, **kw: Any) -> dict[str, Any]:
    """doctor's arguments for a classifier set-up (seeded model, AdamW, batch 64)."""
    return dict(model=model, train_data=train if train is not None else data(0),
                val_data=val if val is not None else data(1), loss_fn=loss or nn.CrossEntropyLoss(),
                batch_size=kw.pop("batch_size", 64), **kw)


# ---------------------------------------------------------------------------------------------- faults

class Detached(nn.Module):
    """The encoder's output is detached: the encoder never learns."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.head = nn.Linear(DIM, 64), nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.enc(x)).detach())


class ConstantGate(nn.Module):
    """torch.where with a condition that is never true: the branch gets an all-zero gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.branch, self.head = nn.Linear(DIM, 64), nn.Linear(64, 64), nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.enc(x))
        gate = h.sum(1, keepdim=True) < -1e9  # a threshold no input reaches
        return self.head(torch.where(gate, self.branch(h), h))


def deep_sigmoid(depth: int = 16) -> nn.Sequential:
    """Many sigmoid layers, no normalisation: the gradient vanishes towards the input."""
    layers: list[nn.Module] = [nn.Linear(DIM, 32), nn.Sigmoid()]
    for _ in range(depth):
        layers += [nn.Linear(32, 32), nn.Sigmoid()]
    return nn.Sequential(*layers, nn.Linear(32, CLASSES))


class Bounded(nn.Module):
    """Logits squashed into [-0.1, 0.1]: cross-entropy cannot fall below ~1.2."""

    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.1 * torch.tanh(self.net(x))


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)  # NaN for the negative half of its inputs


class SafeSqrt(nn.Module):
    """A "safe" square root that is not: the forward is finite (the NaN branch is not selected), but
    the backward of torch.where sends 0 * d sqrt(x)/dx = 0 * NaN = NaN through the other branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))


class NoRescaleDropout(nn.Module):
    """A hand-made dropout that forgets to rescale by 1/(1-p): train and eval outputs differ in scale."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (torch.rand_like(x) > self.p) if self.training else x


def scaled_init(scale: float) -> nn.Sequential:
    model = mlp()
    with torch.no_grad():
        model[2].weight.mul_(scale)
    return model


def nan_inputs() -> TensorDataset:
    x, y = blobs()
    x = x.clone()
    x[::37, 3] = math.nan
    return TensorDataset(x, y)


def sorted_loader() -> DataLoader:
    x, y = blobs()
    order = torch.argsort(y, stable=True)
    return DataLoader(TensorDataset(x[order], y[order]), batch_size=64, shuffle=False)


def regression(scale: float = 1.0, offset: float = 0.0, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, DIM, generator=g)
    y = x @ torch.randn(DIM, 1, generator=torch.Generator().manual_seed(7)) + 0.1 * torch.randn(N, 1, generator=g)
    return TensorDataset(x, scale * y + offset)


def binary(seed: int = 0) -> TensorDataset:
    x, y = blobs(seed=seed, classes=2)
    return TensorDataset(x, y.float().unsqueeze(1))


def leaky_val() -> TensorDataset:
    x, y = blobs()
    return TensorDataset(x[:128].clone(), y[:128].clone())


# --------------------------------------------------------------------------------------------- healthy

class BNCNN(nn.Module):
    """A small CNN with BatchNorm and dropout on 16x16 images (the shapes data)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.features(x).flatten(1)))


class ZeroInitResidual(nn.Module):
    """Residual blocks whose last layer starts at zero (as torchvision's zero_init_residual): the
    layers before it get no gradient at initialisation only."""

    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.inp, self.head = nn.Linear(DIM, 64), nn.Linear(64, CLASSES)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
                                    for _ in range(blocks))
        for block in self.blocks:
            nn.init.zeros_(block[-1].weight)
            nn.init.zeros_(block[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def shapes_data(n: int, seed: int) -> TensorDataset:
    return make_shapes(n, seed=seed)


class LSTMClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def sequences(n: int = N, seed: int = 0) -> TensorDataset:
    """Is the running sum of the first feature positive at the end?"""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 12, 8, generator=g)
    return TensorDataset(x, (x[:, :, 0].sum(1) > 0).long())


class TinyGPT(nn.Module):
    """Stands in for a Hugging Face causal LM (transformers is not installed): dict batches in,
    an object with .loss and .logits out."""

    def __init__(self, vocab: int = 16, dim: int = 32, context: int = 16) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(0.1)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, labels: Optional[torch.Tensor] = None) -> SimpleNamespace:
        b, t = input_ids.shape
        x = self.tok(input_ids) + self.pos(torch.arange(t, device=input_ids.device))
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        x = x + self.drop(self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
        x = x + self.drop(self.mlp(self.ln2(x)))
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if labels is not None:  # labels are the inputs, shifted inside the model, as in transformers
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        return SimpleNamespace(loss=loss, logits=logits)


def token_batches(n_batches: int, seed: int, batch: int = 16, vocab: int = 16, context: int = 16) -> list[dict[str, torch.Tensor]]:
    """Random walks on a ring of tokens (learnable), as dict batches with labels = input_ids."""
    g = torch.Generator().manual_seed(seed)
    steps = torch.randint(-1, 2, (n_batches * batch, context), generator=g)
    start = torch.randint(0, vocab, (n_batches * batch, 1), generator=g)
    ids = (start + steps.cumsum(1)) % vocab
    return [{"input_ids": ids[i:i + batch], "labels": ids[i:i + batch]} for i in range(0, len(ids), batch)]


def builtin(name: str, **kw: Any) -> dict[str, Any]:
    return dict(model=builtin_task(name), **kw)


# ---------------------------------------------------------------------------------------------- the zoo

@dataclass
class Setup:
    name: str
    make: Callable[[], dict[str, Any]]  # doctor's arguments
    check: Optional[str] = None  # the check meant to find the fault; None: healthy
    status: str = "fail"  # what that check should report: fail, or warn for the soft faults
    fault: str = ""


SETUPS: list[Setup] = [
    Setup("detached encoder", lambda: classify(Detached()), "gradients", "fail", "encoder output .detach()'ed"),
    Setup("constant torch.where", lambda: classify(ConstantGate()), "gradients", "fail", "a branch behind a never-true gate"),
    Setup("layer left out of the optimizer", lambda: classify(mlp(), optimizer=lambda params: torch.optim.AdamW(
          list(params)[2:])), "gradients", "fail", "the optimizer built from the last layer only"),
    Setup("deep sigmoid MLP", lambda: classify(deep_sigmoid()), "gradients", "warn", "vanishing gradients (18 sigmoid layers)"),
    Setup("bounded logits", lambda: classify(Bounded()), "overfit", "fail", "0.1*tanh on the logits"),
    Setup("log of activations", lambda: classify(nn.Sequential(nn.Linear(DIM, 64), Log(), nn.Linear(64, CLASSES))),
          "nonfinite", "fail", "NaN in forward (log of negatives)"),
    Setup("sqrt in torch.where", lambda: classify(nn.Sequential(nn.Linear(DIM, 64), SafeSqrt(), nn.Linear(64, CLASSES))),
          "nonfinite", "fail", "NaN in backward through torch.where"),
    Setup("NaN in inputs", lambda: classify(mlp(), train=nan_inputs()), "nonfinite", "fail", "a NaN feature in 1 sample of 37"),
    Setup("softmax + CrossEntropyLoss", lambda: classify(nn.Sequential(mlp(), nn.Softmax(dim=1))), "loss", "fail",
          "probabilities fed to a loss that expects logits"),
    Setup("sigmoid + BCEWithLogitsLoss", lambda: classify(nn.Sequential(mlp(out=1), nn.Sigmoid()), train=binary(0),
          val=binary(1), loss=nn.BCEWithLogitsLoss()), "loss", "fail", "probabilities fed to a loss that expects logits"),
    Setup("labels out of range", lambda: classify(mlp(out=3)), "loss", "fail", "3 outputs for 4 classes"),
    Setup("float labels", lambda: classify(mlp(), train=TensorDataset(blobs()[0], blobs()[1].float())), "loss", "fail",
          "class ids as float32"),
    Setup("huge initial logits", lambda: classify(scaled_init(40.0)), "loss", "warn", "last layer initialised 40x too large"),
    Setup("unscaled regression targets", lambda: classify(mlp(out=1), train=regression(1000.0, 5000.0),
          val=regression(1000.0, 5000.0, seed=1), loss=nn.MSELoss()), "loss", "warn", "targets in the thousands"),
    Setup("raw pixel-scale inputs", lambda: classify(mlp(), train=TensorDataset(blobs()[0] * 60 + 128, blobs()[1]),
          val=TensorDataset(blobs(seed=1)[0] * 60 + 128, blobs(seed=1)[1])), "data", "warn", "inputs in 0..255"),
    Setup("sorted, unshuffled loader", lambda: classify(mlp(), train=sorted_loader(), batch_size=None), "data", "fail",
          "DataLoader(shuffle=False) over data sorted by class"),
    Setup("constant label", lambda: classify(mlp(), train=TensorDataset(blobs()[0], torch.zeros(N, dtype=torch.long))),
          "data", "fail", "every label 0"),
    Setup("validation leak", lambda: classify(mlp(), val=leaky_val()), "data", "fail", "validation = 128 training samples"),
    Setup("dropout without rescaling", lambda: classify(nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), NoRescaleDropout(),
          nn.Linear(64, CLASSES))), "modes", "warn", "a custom dropout that differs in train() and eval() in scale"),
    Setup("LR far too high", lambda: classify(mlp(), lr=3.0), "recipe", "warn", "AdamW at lr 3"),
    Setup("warmup 30% of the run", lambda: classify(mlp(), warmup=300, run_steps=1000), "recipe", "warn", "300 of 1000 updates"),
    Setup("batch over the memory", lambda: classify(mlp(hidden=1024), batch_size=512, memory_budget="4MiB"), "recipe",
          "fail", "batch 512 against a 4 MiB budget"),
    # healthy
    Setup("MLP classifier", lambda: classify(mlp())),
    Setup("MLP regression", lambda: classify(mlp(out=1), train=regression(), val=regression(seed=1), loss=nn.MSELoss())),
    Setup("residual MLP, zero-init branches", lambda: classify(ZeroInitResidual())),
    Setup("CNN with BatchNorm", lambda: classify(BNCNN(), train=shapes_data(1024, 1), val=shapes_data(256, 2))),
    Setup("LSTM classifier", lambda: classify(LSTMClassifier(), train=sequences(), val=sequences(seed=1))),
    Setup("HF-style GPT, dict batches", lambda: dict(model=TinyGPT(), train_data=token_batches(16, 0),
          val_data=token_batches(4, 1))),
    Setup("built-in shapes", lambda: builtin("shapes")),
    Setup("built-in charlm", lambda: builtin("charlm")),
]
QUICK = ("detached encoder", "NaN in inputs", "MLP classifier")  # --quick: a gradient fault, a data fault, a healthy one


def smoke_run(setup: Setup) -> bool:
    """The peer: what Lightning's ``fast_dev_run`` checks, one training update and one validation
    batch through the same step. A fault counts as found when they raise or give a non-finite loss."""
    torch.manual_seed(0)
    kw = setup.make()
    # A UsageError here is a mistake of this harness, not a finding.
    sub = resolve_inputs("smoke run", kw["model"], kw.get("train_data"), kw.get("loss_fn"), kw.get("optimizer"),
                         val_data=kw.get("val_data"), batch_size=kw.get("batch_size"), device="cpu")
    step = TrainStep(sub.model, sub.optimizer, sub.compute, device=sub.device, precision=sub.precision)
    step.set_lr(kw.get("lr") or 1e-3)
    try:
        out = step(BatchStream(sub.data, sub.batch_size, seed=0).take(1))
        val = sub.val_data if sub.val_data is not None else sub.data
        with torch.no_grad():
            loss = sub.compute(sub.model, next(iter(BatchStream(val, sub.batch_size or 64, seed=1).take(1))))[0]
        return not (math.isfinite(out.loss) and math.isfinite(float(loss)))
    except Exception:  # what the step raises is what it finds: a UsageError too (labels past the classes)
        return True


def grouped(kw: dict[str, Any]) -> dict[str, Any]:
    """A set-up's arguments as doctor takes them: its batch and the run it plans in their option objects."""
    step = {k: kw.pop(k) for k in ("batch_size",) if k in kw}
    planned = {k: kw.pop(k) for k in ("lr", "warmup", "run_steps") if k in kw}
    return dict(kw, step=StepSettings(**step), run=PlannedRun(**planned))


def run(setup: Setup) -> tuple[list[Any], float]:
    torch.manual_seed(0)
    kwargs = grouped(setup.make())
    start = time.perf_counter()
    result = doctor(**kwargs)
    return [f for f in result.items() if f.status in ("fail", "warn")], time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.doctor_zoo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}: a smoke run, not a score")
    args = ap.parse_args()
    torch.set_num_threads(1)
    setups = [s for s in SETUPS if s.name in QUICK] if args.quick else SETUPS
    with recorded() as out:
        ok = score(setups)
    report.write("doctor_zoo", f"doctor on a zoo of broken and healthy set-ups ({len(setups)} set-ups)", out.text(),
                 quick=args.quick)
    return 0 if ok else 1


def score(setups: list[Setup]) -> bool:
    """Print a line a set-up and the scores; whether doctor found every fault with no false alarm."""
    found = faults = healthy_fail = healthy_warn = smoke_found = smoke_false = 0
    print(f"{'set-up':<32} {'expected':<16} {'verdict':<8} {'smoke':<6} {'s':>5}  findings (fail/warn)")
    for setup in setups:
        smoke = smoke_run(setup)
        if setup.check is None:
            smoke_false += smoke
        else:
            smoke_found += smoke
        findings, seconds = run(setup)
        shown = "; ".join(f"{f.status} {f.check}: {f.message[:70]}" for f in findings) or "-"
        if setup.check is None:
            fails = sum(f.status == "fail" for f in findings)
            warns = sum(f.status == "warn" for f in findings)
            healthy_fail += fails
            healthy_warn += warns
            verdict, expected = ("clean" if not findings else ("FALSE+" if fails else "warned")), "healthy"
        else:
            faults += 1
            hit = any(f.check == setup.check and f.status == setup.status for f in findings)
            found += hit
            verdict, expected = ("found" if hit else "MISSED"), f"{setup.status} {setup.check}"
        print(f"{setup.name:<32} {expected:<16} {verdict:<8} {'found' if smoke else '-':<6} {seconds:>5.1f}  {shown}",
              flush=True)
    healthy = sum(s.check is None for s in setups)
    print(f"peer (a fast_dev_run-style smoke run: one update, one validation batch): {smoke_found}/{faults} faults "
          f"found ({smoke_found / faults:.0%}), {smoke_false} false positives on {healthy} healthy set-ups")
    print(f"detection rate {found}/{faults} ({found / faults:.0%}) faults found by their check; false positives on "
          f"{healthy} healthy set-ups: {healthy_fail} failures, {healthy_warn} warnings")
    return found == faults and healthy_fail == 0 and healthy_warn <= 1


if __name__ == "__main__":
    sys.exit(main())
