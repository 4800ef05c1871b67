import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import tunekit
from tunekit import Measurement, Refine, StepSettings, Sweep, Task, TaskSpec, UsageError, load_task, train
from tunekit.inputs.data import BatchStream

from .tasks import MLP, PlainDictModel, classification_data, dict_batches, hf_task, regression_data


def _one_line(exc: pytest.ExceptionInfo[UsageError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_builtin_by_name_with_config() -> None:
    task = load_task("shapes", {"width": 4})
    model = task.make_model(0)
    assert model.conv1.out_channels == 4  # type: ignore[union-attr]
    assert task.name == "shapes"


def test_module_function_spec_receives_config() -> None:
    task = load_task("tests.tasks:regression_task", {"hidden": 5})
    assert task.make_model().net[0].out_features == 5  # type: ignore[index]
    assert task.name == "regression"


def test_module_function_without_parameters() -> None:
    assert load_task("tests.tasks:classification_task").name == "classification"


def test_file_spec(tmp_path: Path) -> None:
    f = tmp_path / "my_task.py"
    f.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from torch.utils.data import TensorDataset
        from tunekit import Task

        def make(config):
            x = torch.randn(32, 3); y = x.sum(1, keepdim=True)
            return Task(model=lambda: nn.Linear(3, int(config.get("out", 1))),
                        train_data=TensorDataset(x, y), loss=nn.MSELoss(), batch_size=8)
    """))
    task = load_task(f"{f}:make", {"out": 1})
    assert task.name == "make"
    assert train(task, lr=1e-2, run_steps=3, device="cpu").updates == 3


def test_task_objects_pass_through() -> None:
    task = hf_task()
    assert load_task(task) is task


# Every public entry point, at its cheapest, on a task in any form.
ENTRY_POINTS = {
    "lr_find": lambda t: tunekit.lr_find(t, sweep=Sweep(sweep_steps=10), refine=Refine(enabled=False),
                                         step=StepSettings(device="cpu"), progress=False),
    "doctor": lambda t: tunekit.doctor(t, step=StepSettings(device="cpu"), progress=False),
    "probe": lambda t: tunekit.probe(t, step=StepSettings(device="cpu"),
                                     measure=Measurement(trace_sizes=(2, 4), throughput_points=1, timing_steps=1,
                                                         noise_repeats=0, calibrate_steps=False, batch_limit=8),
                                     memory_budget="64MiB", progress=False),
    "train": lambda t: tunekit.train(t, run_steps=2, device="cpu", progress=False),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_takes_every_form_of_task(entry: str) -> None:
    """A built-in name, a 'module:fn' spec and a TaskSpec work wherever a Task does (search's own tests
    cover it): each is loaded by load_task, the one door."""
    for form, name in (("shapes", "shapes"), ("tests.tasks:regression_task", "regression"),
                       (TaskSpec("tests.tasks:regression_task", {"hidden": 5}), "regression")):
        result = ENTRY_POINTS[entry](form)
        said = result.task if entry in ("train", "doctor") else result.settings["task"]
        assert said == name, (entry, form)
    with pytest.raises(UsageError, match=r"a tunekit.Task.*(got 42 \(int\)|got a int)") as exc:
        ENTRY_POINTS[entry](42)  # anything else: one line, not an AttributeError
    _one_line(exc)


def test_a_task_object_given_a_config_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match="config was given with a Task object: it is built already") as exc:
        load_task(hf_task(), {"width": 4})
    _one_line(exc)


@pytest.mark.parametrize(
    "spec, pattern",
    [
        ("nope", "unknown task 'nope'.*built-in name \\(shapes, charlm\\)"),
        ("nope.py", "did you mean 'FILE.py:function'"),
        ("", "empty"),
        ("missing/file.py:make", "task file 'missing/file.py'.*does not exist"),
        ("no_such_module_xyz:make", "module 'no_such_module_xyz'.*not found"),
        ("tests.tasks:no_such_function", "has no function 'no_such_function'"),
        ("tests.tasks:not_a_task", "returned a int, not a tunekit.Task"),
        ("tests.tasks:", "does not name a function"),
    ],
)
def test_bad_specs_give_one_line(spec: str, pattern: str) -> None:
    with pytest.raises(UsageError, match=pattern) as exc:
        load_task(spec)
    _one_line(exc)


def test_file_that_fails_to_import(tmp_path: Path) -> None:
    f = tmp_path / "bad.py"
    f.write_text("import definitely_not_installed_pkg\n")
    with pytest.raises(UsageError, match="failed to import: ModuleNotFoundError") as exc:
        load_task(f"{f}:make")
    _one_line(exc)


def test_hf_style_dict_batches() -> None:
    result = train(hf_task(), lr=1e-1, run_steps=20, eval_every=10, device="cpu")
    assert not result.diverged
    assert result.losses[-1] < result.losses[0]
    assert "accuracy" in result.evals[-1]  # logits and labels came through the .logits attribute


def test_dict_batches_with_a_criterion_hold_labels_back() -> None:
    task = Task(model=PlainDictModel, train_data=dict_batches(), loss=nn.CrossEntropyLoss())
    assert train(task, lr=1e-1, run_steps=5, device="cpu").updates == 5


def test_compute_loss_for_other_batches() -> None:
    x, y = regression_data(64).tensors
    batches = [{"features": {"x": x[i : i + 8]}, "target": y[i : i + 8]} for i in range(0, 64, 8)]
    task = Task(model=MLP, train_data=batches,
                compute_loss=lambda m, b: nn.functional.mse_loss(m(b["features"]["x"]), b["target"]))
    result = train(task, lr=1e-2, run_steps=12, device="cpu")
    assert result.updates == 12 and result.samples == 12 * 8


def test_dataloader_is_rebatched_keeping_collate() -> None:
    seen: list[int] = []

    def collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(len(items))
        return torch.stack([a for a, _ in items]), torch.stack([b for _, b in items])

    loader = DataLoader(classification_data(64), batch_size=4, collate_fn=collate)
    stream = BatchStream(loader, batch_size=16, seed=0)
    x, _ = next(stream)
    assert x.shape[0] == 16 and seen == [16]


def test_stream_is_seeded_and_reshuffles() -> None:
    data = classification_data(64)
    a = [b[1].tolist() for b in BatchStream(data, 16, seed=1).take(8)]
    b = [b[1].tolist() for b in BatchStream(data, 16, seed=1).take(8)]
    assert a == b
    assert a[:4] != a[4:]  # epoch 2 has another order


def test_hf_batch_without_loss_or_labels_is_a_usage_error() -> None:
    batches = [{"input_values": b["input_values"]} for b in dict_batches(2)]
    task = Task(model=PlainDictModel, train_data=batches)
    with pytest.raises(UsageError, match="returns .loss"):
        train(task, run_steps=1, device="cpu")
    with pytest.raises(UsageError, match="no trainable parameters"):
        train(Task(model=nn.Identity, train_data=batches), run_steps=1, device="cpu")


def test_bad_task_arguments() -> None:
    with pytest.raises(UsageError, match="factory, not a model instance"):
        Task(model=MLP(), train_data=[])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="one-shot iterator"):
        Task(model=MLP, train_data=iter([1, 2]))
    with pytest.raises(UsageError, match="not both"):
        Task(model=MLP, train_data=[], loss=nn.MSELoss(), compute_loss=lambda m, b: b)
    with pytest.raises(UsageError, match="precision 'fp8'"):
        Task(model=MLP, train_data=[], precision="fp8")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="batch size 1000 is larger than the dataset"):
        train(Task(model=MLP, train_data=regression_data(32), loss=nn.MSELoss()), batch_size=1000, device="cpu")
    with pytest.raises(UsageError, match="unknown training setting 'learning_rate'"):
        train(Task(model=MLP, train_data=regression_data(32), loss=nn.MSELoss()), learning_rate=1e-3)


class _TupleModel(nn.Module):
    """Returns (logits, features), as many models do; a criterion cannot take that."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net(x), x


def test_a_tuple_returning_model_gets_the_compute_loss_hint() -> None:
    task = Task(model=_TupleModel, train_data=classification_data(n=64), loss=nn.CrossEntropyLoss(), batch_size=16)
    with pytest.raises(UsageError) as exc:
        train(task, run_steps=2, progress=False)
    msg = _one_line(exc)
    assert "the model returned a tuple of 2, not a tensor" in msg and "compute_loss=" in msg
    assert isinstance(exc.value.__cause__, TypeError)  # what the criterion said is kept


def test_a_loss_that_takes_the_tuple_is_left_alone() -> None:
    task = Task(model=_TupleModel, train_data=classification_data(n=64), batch_size=16,
                loss=lambda out, y: nn.functional.cross_entropy(out[0], y))
    assert len(train(task, run_steps=2, progress=False).losses) == 2


def test_a_worker_names_the_studys_task_file_where_its_machine_keeps_it(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared study stores the task file's absolute path; a worker on a machine that keeps the project in
    another folder names its own copy (same file name, same function) and is not refused."""
    from tunekit.integrations.task_spec import same_task

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "mytasks.py").write_text("")
    monkeypatch.chdir(tmp_path / "proj")
    here = f"{tmp_path / 'proj' / 'mytasks.py'}:fn"
    assert same_task(here, "mytasks.py:fn") and same_task("mytasks.py:fn", here)  # stored relative by 0.1.0
    assert same_task("/home/alice/proj/mytasks.py:fn", here)  # the creator's machine, another folder
    assert not same_task("/home/alice/proj/mytasks.py:other", here)
    assert not same_task("/home/alice/proj/theirtasks.py:fn", here)
    assert same_task("tests.tasks:regression_task", "tests.tasks:regression_task")
    assert not same_task("tests.tasks:regression_task", "tests.tasks:classification_task")
    assert not same_task("shapes", None)
