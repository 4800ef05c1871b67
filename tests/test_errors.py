"""Errors name Python parameters through the API and flags through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunekit import UsageError, lr_find, search, train
from tunekit.cli import build_parser, in_cli_terms, main

from .tasks import classification_task


@pytest.mark.parametrize("call, hint", [
    (lambda t: lr_find(t, accumulation_steps=0), "pass e.g. accumulation_steps=2"),
    (lambda t: lr_find(t, min_lr=1.0, max_lr=0.5), "pass e.g. min_lr=1e-7 max_lr=10"),
    (lambda t: train(t, accumulation_steps=0), "pass e.g. accumulation_steps=2"),
    (lambda t: train(t, eval_batches=0), "pass e.g. eval_batches=20"),
    (lambda t: search(t, trials=0), "pass e.g. trials=12"),
    (lambda t: search(t, budget="lots"), "pass e.g. budget=4000samples"),
])
def test_api_errors_name_parameters_not_flags(call, hint: str) -> None:
    with pytest.raises(UsageError) as exc:
        call(classification_task())
    assert hint in str(exc.value) and "--" not in str(exc.value)


def test_cli_says_the_same_hints_as_its_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lr-find", "--accumulation-steps", "0", "--out", str(tmp_path / "a"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("pass e.g. --accumulation-steps 2") and len(err.splitlines()) == 1
    assert not (tmp_path / "a").exists()


def test_in_cli_terms_rewrites_only_the_commands_flags() -> None:
    parser = build_parser()
    train_usage = parser.parse_args(["train"]).usage()
    search_usage = parser.parse_args(["search"]).usage()
    assert in_cli_terms("pass e.g. max_steps=200.", train_usage) == "pass e.g. --steps 200."
    assert in_cli_terms("pass e.g. max_steps=200", search_usage) == "pass e.g. --max-steps 200"
    assert in_cli_terms("pass resume=True, or another out=DIR", search_usage) == "pass --resume, or another --out DIR"
    assert in_cli_terms("evals must be 1: pass e.g. evals=8", search_usage) == "evals must be 1: pass e.g. evals=8"  # no flag
    assert in_cli_terms("max_steps must be >= 2: pass e.g. max_steps=2", search_usage) == "--max-steps must be >= 2: pass e.g. --max-steps 2"
    assert in_cli_terms("rejected its config {'width': 'x=1'}", search_usage) == "rejected its config {'width': 'x=1'}"


def test_a_storage_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/folder/study.db"
    with pytest.raises(UsageError, match=r"storage 'sqlite:///.*' cannot be opened: OperationalError: "):
        search(classification_task(), "from_scratch", trials=1, storage=url, device="cpu")


def test_a_zero_batch_size_is_refused_not_taken_for_the_default() -> None:
    from tunekit import doctor

    for call in (lambda t: lr_find(t, batch_size=0), lambda t: doctor(t, batch_size=0)):
        with pytest.raises(UsageError, match=r"batch_size must be a positive integer, got 0: pass e.g. batch_size=32"):
            call(classification_task())
