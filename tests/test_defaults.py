"""One place for each default (tunekit/defaults.py), and the results' typed settings.

The doctor's checks clip as the task's recipe does; a doctor.json or probe.json saved by
0.1.0 (a dict, ``steps`` for the run's length) loads into the records.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tunekit import PlannedRun, StepSettings, defaults, doctor
from tunekit.results import DoctorResult, ProbeResult
from tunekit.results.doctor import DoctorSettings
from tunekit.results.probe import ProbeRunSettings
from tunekit.training.loop import TrainConfig
from tunekit.training.step import TrainStep

from .tasks import classification_task


def test_train_config_takes_its_defaults_from_the_one_place() -> None:
    cfg = TrainConfig()
    assert (cfg.max_steps, cfg.run_steps, cfg.warmup, cfg.schedule, cfg.min_lr_ratio, cfg.clip_grad_norm, cfg.lr) == (
        defaults.RUN_STEPS, defaults.RUN_STEPS, defaults.WARMUP, defaults.SCHEDULE, defaults.MIN_LR_RATIO,
        defaults.CLIP_GRAD_NORM, defaults.LR)


@pytest.mark.parametrize("task_clip", [0.25, None])
def test_the_doctor_clips_as_the_tasks_recipe(task_clip: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step the doctor's checks build (the gradient check's update, the overfit's runs and range
    test, the recipe's quick range test and memory trace) clips at the task's clip_grad_norm."""
    clips: list[Any] = []
    real = TrainStep.__init__

    def spy(self: TrainStep, *args: Any, **kwargs: Any) -> None:
        clips.append(kwargs.get("clip_grad_norm", "unset"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(TrainStep, "__init__", spy)
    task = classification_task()
    task = dataclasses.replace(task, defaults={**task.defaults, "clip_grad_norm": task_clip})
    result = doctor(task, run=PlannedRun(lr=1e-3), step=StepSettings(device="cpu"), progress=False)
    assert clips and set(clips) == {task_clip}, clips
    assert result.settings.clip_grad_norm == task_clip and result.settings.run_steps == defaults.RUN_STEPS


def test_a_doctor_json_of_0_1_loads_into_its_settings_record(tmp_path: Any) -> None:
    saved = {"findings": [], "task": "t", "settings": {"lr": 0.001, "warmup": 0.05, "steps": 2000, "device": "cpu",
                                                       "from": {"kind": "hf", "notes": []}, "future_key": 1}}
    (tmp_path / "doctor.json").write_text(json.dumps(saved))
    r = DoctorResult.load(tmp_path / "doctor.json")
    assert isinstance(r.settings, DoctorSettings) and r.settings.run_steps == r.settings["run_steps"] == 2000
    assert r.settings.adapted_from == {"kind": "hf", "notes": []} and r.settings.extra == {"future_key": 1}
    with pytest.deprecated_call(match=r"DoctorSettings\['steps'\] is deprecated since tunekit 0\.2\.0 and removed "
                                      r"in tunekit 0\.3\.0: use \.run_steps"):
        assert r.settings["steps"] == 2000  # 0.1.0's key, read as it was (a shim)
    back = json.loads(r.to_json())["settings"]
    assert back["run_steps"] == 2000 and DoctorResult.from_json(r.to_json()) == r


def test_a_probe_settings_record_takes_a_search_note_by_key() -> None:
    s = ProbeRunSettings.of({"task": "t", "memory_budget": "1GiB", "max_batch": 64})
    assert s is not None and s.batch_limit == 64 and s.get("noise_not_measured") is None
    s["noise_not_measured"] = "too dear"  # what a search writes into a probe's settings
    assert s.noise_not_measured == "too dear" and "noise_not_measured" in s
    with pytest.raises(KeyError):
        s["no_such_setting"]  # noqa: B018  (a key that is neither a field nor kept)
    assert ProbeResult.__dataclass_fields__["settings"].default_factory is ProbeRunSettings  # type: ignore[attr-defined]
