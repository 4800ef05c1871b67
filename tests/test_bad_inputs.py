"""Bad inputs (a loss that is not one value, labels past the classes, another model's optimizer, an
empty dataset) are one-line usage errors that say what is wrong and the fix: from the API, and from
the CLI with exit status 2 and no traceback. The doctor reports them as one finding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import tunekit
from tunekit import Local, Refine, StepSettings, Sweep, UsageError
from tunekit.cli import main

from .tasks import MLP, classification_data

NOT_SCALAR = ("the loss returned a tensor of shape (32,), not a scalar: use reduction='mean' "
              "(nn.CrossEntropyLoss(reduction='mean')) or reduce it in compute_loss")
A_FLOAT = "the loss returned a float"
OUT_OF_RANGE = "label 4 is out of range for the model's 4 classes (labels must lie in 0..3"


def _objects(seed: int = 0) -> tuple[nn.Module, TensorDataset]:
    torch.manual_seed(seed)
    return MLP(8, 16, 4), classification_data(256)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``tunekit ARGS`` in this process: (its exit status, its stderr)."""
    code = main(list(args))
    return code, capsys.readouterr().err.strip()


# ------------------------------------------------------------------ 10. the loss and the labels

def test_a_per_sample_loss_is_a_usage_error_in_lr_find() -> None:
    model, data = _objects()
    loss = nn.CrossEntropyLoss(reduction="none")
    with pytest.raises(UsageError) as exc:
        tunekit.lr_find(model, data, loss, torch.optim.AdamW(model.parameters()), step=StepSettings(batch_size=32),
                        sweep=Sweep(sweep_steps=10), refine=Refine(enabled=False))
    assert str(exc.value) == NOT_SCALAR


def test_a_per_sample_loss_from_compute_loss_says_to_reduce_it_there() -> None:
    model, data = _objects()

    def compute(m: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return nn.functional.cross_entropy(m(batch[0]), batch[1], reduction="none")

    with pytest.raises(UsageError, match=r"shape \(32,\), not a scalar: reduce it to one value in compute_loss"):
        tunekit.train(tunekit.Task(model=lambda: model, train_data=data, compute_loss=compute, batch_size=32),
                      run_steps=2, device="cpu")


def test_a_float_loss_is_a_usage_error() -> None:
    model, data = _objects()
    with pytest.raises(UsageError, match=r"^the loss returned a float \(1.0\), not a tensor: return the loss tensor"):
        tunekit.lr_find(model, data, lambda out, y: 1.0, step=StepSettings(batch_size=32), sweep=Sweep(sweep_steps=10),
                        refine=Refine(enabled=False))


def test_labels_past_the_classes_are_a_usage_error_naming_the_label_and_the_classes() -> None:
    model, data = _objects()
    x, y = data.tensors
    with pytest.raises(UsageError) as exc:
        tunekit.lr_find(model, TensorDataset(x, y + 2), nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters()),
                        step=StepSettings(batch_size=32), sweep=Sweep(sweep_steps=10), refine=Refine(enabled=False))
    assert str(exc.value).startswith(OUT_OF_RANGE) and "remap the labels to 0..3" in str(exc.value)
    assert isinstance(exc.value.__cause__, IndexError)


def test_labels_past_the_classes_in_the_users_own_loss_are_the_same_usage_error() -> None:
    model, data = _objects()
    x, y = data.tensors

    def my_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return -out.log_softmax(-1)[torch.arange(len(target)), target].mean()  # raises IndexError past the classes

    with pytest.raises(UsageError, match=r"^label [45] is out of range for the model's 4 classes"):
        tunekit.lr_find(model, TensorDataset(x, y + 2), my_loss, step=StepSettings(batch_size=32),
                        sweep=Sweep(sweep_steps=10), refine=Refine(enabled=False))


def test_an_index_error_of_the_users_own_loss_with_labels_in_range_stays_theirs() -> None:
    model, data = _objects()

    def my_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return out[:, 7].mean()  # their bug: no column 7

    with pytest.raises(IndexError):
        tunekit.lr_find(model, data, my_loss, step=StepSettings(batch_size=32), sweep=Sweep(sweep_steps=10),
                        refine=Refine(enabled=False))


@pytest.mark.parametrize("spec, message", [
    ("tests.tasks:nonscalar_loss_task", "the loss returned a tensor of shape ("),
    ("tests.tasks:float_loss_task", A_FLOAT),
    ("tests.tasks:labels_out_of_range_task", "label 4 is out of range for the model's 4 classes"),
])
@pytest.mark.parametrize("command", [["lr-find", "--sweep-steps", "10", "--no-refine"], ["probe", "--memory-budget", "1GiB"],
                                     ["train", "--run-steps", "2"]], ids=["lr-find", "probe", "train"])
def test_the_cli_says_a_bad_loss_or_bad_labels_in_one_line(command: list[str], spec: str, message: str,
                                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, *command, "--task", spec, "--device", "cpu", "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"tunekit {command[0]}: error: {message}"), err


@pytest.mark.parametrize("spec, message, fix", [
    ("tests.tasks:nonscalar_loss_task", "the loss returned a tensor of shape (32,), not a scalar",
     "use reduction='mean' (nn.CrossEntropyLoss(reduction='mean')) or reduce it in compute_loss"),
    ("tests.tasks:float_loss_task", "the loss returned a float", "return the loss tensor itself"),
    ("tests.tasks:labels_out_of_range_task", "labels range over 2..5 but the output has 4 classes (0..3)",
     "remap the labels"),
])
def test_the_doctor_reports_a_bad_loss_as_one_failure_of_the_loss_check(spec: str, message: str, fix: str) -> None:
    result = tunekit.doctor(tunekit.load_task(spec), step=StepSettings(device="cpu"))
    failures = [f for f in result.items() if f.status == "fail"]
    assert len(failures) == 1, result.table()
    assert failures[0].check == "loss" and failures[0].message.startswith(message) and fix in failures[0].fix


# ------------------------------------------------------------------ 11. another model's optimizer

FOREIGN = ("the optimizer (AdamW) holds none of the model's parameters: it was built on another model's; "
           "build the optimizer on this model's parameters: torch.optim.AdamW(model.parameters())")


@pytest.mark.parametrize("call", [
    lambda m, d, o: tunekit.lr_find(m, d, nn.CrossEntropyLoss(), o, step=StepSettings(batch_size=32),
                                    sweep=Sweep(sweep_steps=10), refine=Refine(enabled=False)),
    lambda m, d, o: tunekit.probe(m, d, nn.CrossEntropyLoss(), o, memory_budget="1GiB"),
    lambda m, d, o: tunekit.doctor(m, d, nn.CrossEntropyLoss(), o, step=StepSettings(batch_size=32)),
    lambda m, d, o: tunekit.lr_find(m, d, nn.CrossEntropyLoss(), lambda params: o, step=StepSettings(batch_size=32),
                                    sweep=Sweep(sweep_steps=10)),
], ids=["lr_find", "probe", "doctor", "a factory"])
def test_an_optimizer_on_another_models_parameters_is_refused(call) -> None:
    model, data = _objects()
    other, _ = _objects(seed=1)
    with pytest.raises(UsageError) as exc:
        call(model, data, torch.optim.AdamW(other.parameters()))
    assert str(exc.value) == FOREIGN


def test_train_refuses_a_task_whose_optimizer_factory_takes_another_models_parameters() -> None:
    from .tasks import foreign_optimizer_task

    with pytest.raises(UsageError, match=r"^the optimizer \(AdamW\) holds none of the model's parameters"):
        tunekit.train(foreign_optimizer_task(), run_steps=2, device="cpu")


@pytest.mark.parametrize("command", ["lr-find", "doctor", "train"])
def test_the_cli_refuses_another_models_optimizer_in_one_line(command: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, command, "--task", "tests.tasks:foreign_optimizer_task", "--device", "cpu",
                     "--out", str(tmp_path / "o"), "--quiet")
    assert (code, err) == (2, f"tunekit {command}: error: {FOREIGN}")


@pytest.mark.parametrize("frozen", [True, False], ids=["requires_grad off", "left out of the optimizer"])
def test_an_optimizer_on_part_of_the_model_is_accepted(frozen: bool) -> None:
    model, data = _objects()
    backbone, head = model.net[0], model.net[3]
    if frozen:
        backbone.requires_grad_(False)
    result = tunekit.lr_find(model, data, nn.CrossEntropyLoss(), torch.optim.SGD(head.parameters(), lr=0.1),
                             step=StepSettings(batch_size=32), sweep=Sweep(sweep_steps=10),
                             refine=Refine(enabled=False))
    assert len(result.losses) == 10


# ------------------------------------------------------------------ 13. messages

def test_min_lr_above_max_lr_is_said_in_api_names_or_in_flags_never_both(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError) as exc:
        tunekit.lr_find(tunekit.load_task("tests.tasks:classification_task"), sweep=Sweep(min_lr=1, max_lr=0.001))
    assert str(exc.value) == "min_lr 1 must be below max_lr 0.001: pass e.g. min_lr=1e-7 max_lr=10"
    code, err = _cli(capsys, "lr-find", "--min-lr", "1", "--max-lr", "0.001", "--out", str(tmp_path / "o"), "--quiet")
    assert (code, err) == (2, "tunekit lr-find: error: --min-lr 1 must be below --max-lr 0.001: "
                              "pass e.g. --min-lr 1e-7 --max-lr 10")


def test_the_cli_says_a_bare_parameter_as_its_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "probe", "--memory-budget", "1KiB", "--device", "cpu", "--out", str(tmp_path / "o"),
                     "--quiet")
    assert code == 2 and err.startswith("tunekit probe: error: the model does not fit even at batch 1: ")
    assert err.endswith(": raise --memory-budget, use bf16, or a smaller model")
    code, err = _cli(capsys, "probe", "--lr", "0.1", "--out", str(tmp_path / "o"), "--quiet")
    assert (code, err.split(":")[:3]) == (2, ["tunekit probe", " error", " give --lr ... and --lr-batch ... together"])


def test_a_task_metric_without_a_direction_and_a_misspelled_entry_speak_flags(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                            assert_usage_error) -> None:
    """--objective of a task's metric: the fix is --direction, not Python; a misspelled space entry: the nearest
    setting, from a list of entry names (no --max-steps in it)."""
    line = assert_usage_error(["search", "--task", "tests.tasks:regression_task", "--objective", "broken",
                               "--out", str(tmp_path / "o")], "pass --direction maximize (or minimize)")
    assert line == ("tunekit search: error: --objective 'broken' is not built in (loss, accuracy, perplexity): say "
                    "which way is better: pass --direction maximize (or minimize)")
    space = tmp_path / "space.toml"
    space.write_text('[wieght_decay]\ntype = "float"\nlow = 0.001\nhigh = 0.1\n')
    line = assert_usage_error(["search", "--task", "tests.tasks:regression_task", "--space", str(space),
                               "--out", str(tmp_path / "o")], "did you mean [weight_decay]?")
    assert "--" not in line.split("entry [wieght_decay]")[1] and "max_steps" not in line, line
    assert "[weight_decay], or the seeded [batch]) nor [task.NAME]" in line


def test_in_cli_terms_leaves_file_names_calls_quotes_and_space_entries_alone() -> None:
    from tunekit.cli import build_parser, in_cli_terms

    usage = build_parser().parse_args(["search"]).usage()
    for text in ("wrote runs/lr_find.json", "tunekit.lr_find(task)", 'seeded = "lr_find"', "[memory_budget] entry",
                 "call lr_find(model)", "an unknown_name here"):
        assert in_cli_terms(f"x {text}", usage) == f"x {text}"
    assert in_cli_terms("a probe over memory_budget, as sampler_seed says", usage) == \
        "a probe over --memory-budget, as --sampler-seed says"


@pytest.mark.parametrize("task", [42, None, 3.5])
def test_a_task_that_is_neither_a_spec_nor_a_task_says_so(task: object) -> None:
    with pytest.raises(UsageError) as exc:
        tunekit.search(task, trials=1, backend=Local(device="cpu"))  # type: ignore[arg-type]
    assert str(exc.value).startswith(f"a task must be a spec string or a tunekit.Task, got {task!r} "
                                     f"({type(task).__name__}): give a built-in name (")


def _search_json(folder: Path) -> Path:
    from tunekit.results import SearchResult

    trial = {"number": 0, "state": "COMPLETE", "value": 0.5, "params": {"lr": 0.01}, "config": {"lr": 0.01},
             "samples": 100, "updates": 10, "micro_batch": 8, "accumulation_steps": 1, "curve": [[50, 0.7], [100, 0.5]]}
    result = SearchResult(study_name="s", storage="sqlite:///s.db", space="sp", direction="minimize", best_value=0.5,
                          best_params={"lr": 0.01}, best_config={"lr": 0.01}, trials=[trial], seed_params={},
                          distributions={}, seconds=2.0, param_importances={})
    folder.mkdir()
    result.save(folder)
    (folder / "search.png").unlink()
    return folder / "search.json"


@pytest.mark.parametrize("given", ["folder", "file"])
def test_report_takes_the_search_json_as_well_as_its_folder(given: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = _search_json(tmp_path / "s")
    assert main(["report", str(path.parent if given == "folder" else path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"redrew {tmp_path / 's' / 'search.png'} and trials.csv"
    assert (tmp_path / "s" / "search.png").is_file()
    (tmp_path / "s" / "notes.txt").write_text("not json")
    code, err = _cli(capsys, "report", str(tmp_path / "s" / "notes.txt"))
    assert code == 2 and err.startswith(f"tunekit report: error: '{tmp_path / 's' / 'notes.txt'}' is not a search.json")


def test_worker_help_says_the_task_defaults_to_the_studys(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(default: the study's task)" in help_text and "(default: shapes)" not in help_text


EMPTY = TensorDataset(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long))


@pytest.mark.parametrize("data, kind", [(EMPTY, "a TensorDataset of 0 samples"),
                                        (torch.utils.data.DataLoader(EMPTY, batch_size=4), "a DataLoader of 0 samples"),
                                        ([], "a list of no batches")], ids=["Dataset", "DataLoader", "list"])
def test_an_empty_dataset_says_it_is_empty(data: object, kind: str) -> None:
    model, _ = _objects()
    with pytest.raises(UsageError) as exc:
        tunekit.lr_find(model, data, nn.CrossEntropyLoss(), step=StepSettings(batch_size=32))
    assert str(exc.value) == f"train_data is empty ({kind}): pass data with at least one batch"
