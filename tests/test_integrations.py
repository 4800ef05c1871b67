"""Hugging Face Trainer and Lightning objects in hand: lr_find, probe, doctor and search take them, give
the same answers as the same problem written as a Task, and leave them as they were."""

from __future__ import annotations

import dataclasses
import warnings
import weakref
from typing import Any

import pytest
import torch
from torch import nn

import tunekit
from tunekit import Halving, Measurement, ProbeSettings, RandomSampler, Refine, StepSettings, Sweep
from tunekit.errors import UsageError
from tunekit.training.loop import evaluate

pytest.importorskip("transformers")
pytest.importorskip("lightning")

from .their_objects import (hf_task, hf_trainer, lightning_run, lightning_task, tensors_of,  # noqa: E402
                           unchanged)

pytestmark = pytest.mark.slow

LR_FIND = dict(sweep=Sweep(sweep_steps=20), refine=Refine(enabled=False), progress=False)
PROBE = dict(measure=Measurement(trace_sizes=(2, 4), throughput_points=2, timing_steps=1, noise_repeats=4,
                                 calibrate_steps=False, batch_limit=32), progress=False)
SEARCH = dict(trials=6, pruner=Halving(evals=3), progress=False)


def their(family: str, tmp: Any) -> tuple[Any, nn.Module]:
    """(what the user holds, its model)."""
    if family == "lightning":
        run = lightning_run(tmp)
        return run, run.module
    trainer = hf_trainer(family, tmp)
    return trainer, trainer.model


def task_of(family: str) -> tunekit.Task:
    return lightning_task() if family == "lightning" else hf_task(family)


def doctor_lines(result: Any) -> list[tuple[str, str, str]]:
    """The findings; the memory check's message names the machine's free memory, which moves between calls."""
    return [(f["check"], f["status"], "" if "free:" in f["message"] else f["message"]) for f in result.findings]


@pytest.mark.parametrize("family", ["gpt2", "bert", "lightning"])
def test_lr_find_probe_and_doctor_answer_as_the_task_does_and_leave_the_objects(family: str, tmp_path: Any) -> None:
    obj, model = their(family, tmp_path)
    before = tensors_of(model)
    modes = [m.training for m in model.modules()]
    task = task_of(family)
    rng = torch.get_rng_state()

    found, found_task = tunekit.lr_find(obj, **LR_FIND), tunekit.lr_find(task, **LR_FIND)
    assert found.losses == found_task.losses
    assert found.suggestion == found_task.suggestion and found.settings.adapted_from["kind"]
    probed, probed_task = tunekit.probe(obj, **PROBE), tunekit.probe(task, **PROBE)
    assert probed.memory == probed_task.memory and probed.max_batch == probed_task.max_batch
    assert probed.noise == probed_task.noise
    checked, checked_task = tunekit.doctor(obj, progress=False), tunekit.doctor(task, progress=False)
    assert doctor_lines(checked) == doctor_lines(checked_task)

    assert unchanged(model, before) and [m.training for m in model.modules()] == modes
    assert torch.equal(torch.get_rng_state(), rng)
    if family != "lightning":
        assert obj.optimizer is None and obj.lr_scheduler is None  # the Trainer keeps none of ours


def _rngs() -> tuple[Any, ...]:
    import random

    import numpy as np

    return torch.get_rng_state().clone(), random.getstate(), np.random.get_state()[1].copy()


def _same_rngs(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return bool(torch.equal(a[0], b[0]) and a[1] == b[1] and (a[2] == b[2]).all())


@pytest.mark.parametrize("family", ["gpt2", "bert", "lightning"])
def test_a_search_from_their_objects_is_the_tasks_search(family: str, tmp_path: Any) -> None:
    if family == "lightning":
        obj = lightning_run(tmp_path, factory=True)  # a fresh module per trial, as Task(model=TinyLit) builds
    else:
        obj = hf_trainer(family, tmp_path, model_init=True)
    rngs = _rngs()
    result = tunekit.search(obj, "from_scratch", out=tmp_path / "theirs", **SEARCH)
    assert _same_rngs(rngs, _rngs())  # a factory's draws (a module's class, model_init) put back too
    # The probe's timed steps price the trials and place the batches: the same probes, stored, for both.
    saved = tmp_path / "theirs"
    space: Any = "from_scratch"
    if family == "lightning":  # its module has no scheduler: the search keeps the constant LR it trains with
        from tunekit.inputs.space import Entry, SearchSpace, load_space

        sp = load_space("from_scratch")
        fixed = {"schedule": "constant", "warmup": 0, "min_lr_ratio": 1.0}
        space = SearchSpace(sp.name, sp.description, {**sp.entries, **{k: Entry(k, "fixed", value=v) for k, v in fixed.items()}})
    result_task = tunekit.search(task_of(family), space, **SEARCH,
                                 probes=ProbeSettings(lr_find=saved / "lr_find.json", probe=saved / "probe.json"))
    ours = [(t["params"], t["value"], t["state"]) for t in result.trials]
    assert ours == [(t["params"], t["value"], t["state"]) for t in result_task.trials]
    assert len(ours) == 6 and result.best_theirs is not None
    if family == "lightning":
        assert result.best_theirs.get("lr", 1e-2) == result.best_config["lr"]  # the module's own hparam name
        assert "eval_every" not in result.best_theirs  # what tunekit tunes, not how it ran the trials
        # What the module can apply, and only what changes: no schedule for a module without a scheduler, no
        # Trainer argument at the value it has (accumulate_grad_batches=1, its max_steps).
        assert {t["config"]["schedule"] for t in result.trials} == {"constant"}
        assert not {"schedule", "warmup", "min_lr_ratio", "accumulate_grad_batches"} & set(result.best_theirs)
        assert ("max_steps" in result.best_theirs) == (result.best_config["max_steps"] != 24)  # the run's 24 updates
    else:
        assert result.best_theirs["learning_rate"] == result.best_config["lr"]
        assert "in your transformers.Trainer's terms: " in result.table()
    # The best trial's weights: its model scores its value; their own objects load the same weights.
    best = result.best_model()
    task, cfg = result.made_from, result.best_config
    scored = evaluate(best, task.val_data, task.loss_computer(), device=torch.device("cpu"),
                      batch_size=cfg.get("eval_batch_size") or task.batch_size, max_batches=cfg.get("eval_batches"))
    assert scored["loss"] == pytest.approx(result.best_value, rel=1e-5)
    if family == "lightning":  # Lightning's own loader reads the file
        theirs = type(lightning_run(tmp_path).module).load_from_checkpoint(result.best_weights)
    else:
        theirs = result.load_best_into(hf_trainer(family, tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(best.state_dict().values(), theirs.state_dict().values()))


ONE_TRIAL = dict(trials=1, pruner=Halving(evals=2), progress=False)


def test_a_search_from_a_trainer_keeps_its_warmup_and_its_weight_decay(tmp_path: Any) -> None:
    """The seed trial runs the Trainer's warmup (2 of its 24 updates: 0.083 of the run, not the space's
    0.1), and gives back its zero weight decay (searched from 1e-5) and its warmup as no change."""
    trainer = hf_trainer("gpt2", tmp_path, model_init=True)
    assert trainer.args.warmup_steps == 2 and trainer.args.weight_decay == 0.0
    result = tunekit.search(trainer, "from_scratch", out=tmp_path / "hf", probes=tunekit.ProbeSettings(lr_sweep_steps=10),
                            **ONE_TRIAL)
    seed = result.trials[0]
    assert seed["params"]["warmup"] == pytest.approx(2 / 24) and seed["config"]["max_steps"] == 24
    assert result.best_config["weight_decay"] == pytest.approx(1e-5)  # AdamW's range, held two decades below
    assert not {"warmup_steps", "weight_decay"} & set(result.best_theirs)  # the Trainer's own: no change
    from tunekit.integrations import training_arguments

    assert training_arguments({"warmup": 2 / 24, "max_steps": 24}, trainer) == {}  # its 2 updates
    assert training_arguments({"warmup": 0.25, "max_steps": 24}, trainer) == {"warmup_steps": 0.25}
    # train takes it as search does (a fresh model of its model_init), with its warmup as a fraction of the run
    run = tunekit.train(trainer, run_steps=12, device="cpu", progress=False)
    assert run.updates == 12 and run.config["warmup"] == pytest.approx(2 / 24)


def test_a_search_from_a_lightning_module_gives_back_its_recipe_and_a_checkpoint_of_the_best(tmp_path: Any) -> None:
    """A module's weight_decay=0.0 (Adam's L2 range, searched from 1e-8) comes back as no change, and its kept
    checkpoint loads with the best trial's LR in its hparams, not the LR it was built with."""
    from tunekit.integrations import LightningRun

    from .their_objects import adam_lightning_class, lightning_classes, lightning_trainer

    AdamLit = adam_lightning_class()
    run = LightningRun(AdamLit, lightning_classes()[1](), lightning_trainer(tmp_path))
    result = tunekit.search(run, "from_scratch", out=tmp_path / "lit", **ONE_TRIAL)
    assert result.best_config["weight_decay"] == pytest.approx(1e-8)
    assert result.best_theirs == {"lr": result.best_config["lr"]}  # what changes: no 1e-08, no batch_size it has
    loaded = AdamLit.load_from_checkpoint(result.best_weights)
    assert loaded.hparams.lr == result.best_config["lr"] != 1e-3 and loaded.hparams.hidden == 32


def test_the_trainers_recipe_is_read_and_what_cannot_be_honoured_is_said(tmp_path: Any) -> None:
    from tunekit.integrations import adapt

    trainer = hf_trainer("gpt2", tmp_path, gradient_accumulation_steps=2, bf16=True, weight_decay=0.1, max_steps=-1,
                         num_train_epochs=2, lr_scheduler_type="polynomial", warmup_steps=0.25)
    adapted = adapt(trainer)
    d = adapted.task.defaults
    assert d["accumulation_steps"] == 2 and adapted.task.precision == "bf16" and d["clip_grad_norm"] == 0.5
    assert d["max_steps"] == 2 * (96 // 8 // 2) and d["warmup"] == 0.25  # 2 epochs of 6 updates; a quarter of them
    assert any("polynomial" in n for n in adapted.notes)
    groups = adapted.task.make_optimizer(adapted.task.make_model()).param_groups
    assert sorted(g["weight_decay"] for g in groups) == [0.0, 0.1]  # biases and norms do not decay, as in HF
    with pytest.warns(UserWarning, match="polynomial"):
        tunekit.lr_find(trainer, **LR_FIND, step=StepSettings(precision="fp32"))
    # Warmup-stable-decay is a schedule of tunekit's: read, with its floor; a decay it sizes otherwise is said.
    wsd = adapt(hf_trainer("gpt2", tmp_path, lr_scheduler_type="warmup_stable_decay",
                           lr_scheduler_kwargs={"num_decay_steps": 50, "min_lr_ratio": 0.05}))
    assert (wsd.task.defaults["schedule"], wsd.task.defaults["min_lr_ratio"]) == ("wsd", 0.05)
    assert any("num_decay_steps" in n for n in wsd.notes)
    r = tunekit.lr_find(wsd.task, sweep=Sweep(sweep_steps=20), refine=Refine(enabled=False), run_steps=100,
                        progress=False)
    assert "warmup + stable-then-decay run of 100 updates" in r.summary()
    from tunekit.integrations.hf import training_arguments

    back = training_arguments({"schedule": "wsd", "min_lr_ratio": 0.05, "max_steps": 100})  # to HF's names
    assert back["lr_scheduler_type"] == "warmup_stable_decay"
    assert back["lr_scheduler_kwargs"] == {"min_lr_ratio": 0.05, "num_decay_steps": 20}


def test_the_lightning_trainers_settings_are_read(tmp_path: Any) -> None:
    from tunekit.integrations import LightningRun, adapt

    from .their_objects import lightning_classes, lightning_trainer

    module_cls, data_cls = lightning_classes()
    trainer = lightning_trainer(tmp_path, precision="bf16-mixed", accumulate_grad_batches=2,
                                gradient_clip_algorithm="value", max_steps=-1, max_epochs=3)
    adapted = adapt(LightningRun(module_cls(), data_cls(), trainer))
    d = adapted.task.defaults
    assert adapted.task.precision == "bf16" and d["accumulation_steps"] == 2 and d["clip_grad_norm"] == 0.5
    assert d["max_steps"] == 3 * (256 // 16 // 2)  # three epochs of 8 updates
    assert d["schedule"] == "constant" and d["lr"] == 1e-2  # no scheduler: Lightning's constant LR, as configured
    assert any("gradient_clip_algorithm='value'" in n for n in adapted.notes)


def test_an_optimizer_given_to_the_trainer_is_used_and_put_back(tmp_path: Any) -> None:
    from transformers import Trainer

    base = hf_trainer("gpt2", tmp_path)
    optimizer = torch.optim.SGD(base.model.parameters(), lr=0.1, momentum=0.9)
    for p in base.model.parameters():  # a momentum buffer of the user's, to be kept
        optimizer.state[p]["momentum_buffer"] = torch.ones_like(p)
    trainer = Trainer(model=base.model, args=base.args, train_dataset=base.train_dataset, optimizers=(optimizer, None))
    state = {id(p): s["momentum_buffer"].clone() for p, s in optimizer.state.items()}
    assert tunekit.lr_find(trainer, **LR_FIND).settings["optimizer"] == "SGD"  # theirs, not the one HF would build
    assert all(torch.equal(s["momentum_buffer"], state[id(p)]) for p, s in optimizer.state.items())
    assert optimizer.param_groups[0]["lr"] == 0.1


def test_gradient_checkpointing_is_on_for_the_call_and_off_after(tmp_path: Any) -> None:
    trainer = hf_trainer("gpt2", tmp_path, gradient_checkpointing=True)
    seen = []
    model = trainer.model
    original = model.forward

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()))
        return original(*args, **kwargs)

    model.forward = spy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tunekit.lr_find(trainer, **LR_FIND)
    del model.forward
    assert seen and all(seen)
    assert not any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


@pytest.mark.parametrize("make", ["gpt2", "bert", "vit", "lightning"])
def test_doctor_raises_no_false_alarm_on_healthy_models(make: str, tmp_path: Any) -> None:
    if make == "lightning":
        obj = lightning_run(tmp_path)
    else:
        obj = hf_trainer(make, tmp_path, warmup_steps=0)
    result = tunekit.doctor(obj, progress=False)
    alarms = [(f["check"], f["message"]) for f in result.findings if f["status"] in ("warn", "fail")]
    assert alarms == []
    if make in ("gpt2", "bert", "vit"):  # their attention's functional dropout is named as expected
        modes = [f for f in result.findings if f["check"] == "modes"]
        assert modes and "Attention" in modes[0]["message"]


def test_doctor_finds_a_softmax_before_cross_entropy_in_a_classification_head(tmp_path: Any) -> None:
    trainer = hf_trainer("bert", tmp_path)
    trainer.model.classifier = nn.Sequential(trainer.model.classifier, nn.Softmax(dim=-1))
    result = tunekit.doctor(trainer, progress=False)
    # The model's own loss: cross-entropy from integer labels, as transformers computes it for this head.
    assert any(f["check"] == "loss" and f["status"] == "fail" and "softmax" in f["fix"] for f in result.findings)


def test_their_objects_refused_in_one_line(tmp_path: Any) -> None:
    trainer = hf_trainer("gpt2", tmp_path, model_init=True)
    trainer.model = None
    with pytest.raises(UsageError, match="holds no model"):
        tunekit.lr_find(trainer, **LR_FIND)
    with pytest.raises(UsageError, match="brings its own data"):
        tunekit.lr_find(hf_trainer("gpt2", tmp_path), [1, 2], **LR_FIND)


def test_search_own_runs_each_trial_in_the_users_trainer_and_frees_it(tmp_path: Any) -> None:
    from transformers import Trainer

    from tunekit import search_own

    base = hf_trainer("gpt2", tmp_path, model_init=True)
    alive: list[weakref.ref[Any]] = []
    trained: list[dict[str, Any]] = []

    def run(trial: Any) -> None:
        assert all(ref() is None for ref in alive), "a finished trial's model outlived it"
        args = dataclasses.replace(base.args, **trial.training_arguments())
        trained.append({"lr": args.learning_rate, "max_steps": args.max_steps})
        trainer = Trainer(model_init=base.model_init, args=args, train_dataset=base.train_dataset,
                          eval_dataset=base.eval_dataset, callbacks=[trial.hf_callback()])
        alive.append(weakref.ref(trainer.model))
        trainer.train()

    rngs = _rngs()
    result = search_own(base, "from_scratch", run=run, trials=4, progress=False, pruner=Halving(evals=3))
    assert _same_rngs(rngs, _rngs())  # the Trainer seeds the global RNGs as it trains: put back
    assert [t["state"] for t in result.trials] == ["COMPLETE"] * 4
    assert [t["config"]["lr"] for t in sorted(result.trials, key=lambda t: t["number"])] == [t["lr"] for t in trained]
    assert all(len(t["curve"]) == 3 for t in result.trials)  # every evaluation reported


def test_search_own_keeps_the_best_weights_and_gives_back_each_trials_memory(tmp_path: Any) -> None:
    """12 trials in the user's own Trainer, whose model carries a 64 MiB buffer: the process's memory as each
    trial starts stays within 5% of its level after the first; the best trial's weights, loaded into the
    user's Trainer, evaluate to the best trial's value."""
    from transformers import Trainer

    from tunekit import search_own

    base = hf_trainer("gpt2", tmp_path, model_init=True)
    rss: list[int] = []

    def heavy() -> nn.Module:
        model = base.model_init()
        model.register_buffer("ballast", torch.ones(16 * 2**20), persistent=False)  # not in the weights' file
        return model

    def run(trial: Any) -> None:
        with open("/proc/self/statm") as f:
            rss.append(int(f.read().split()[1]) * 4096)
        args = dataclasses.replace(base.args, **trial.training_arguments())
        Trainer(model_init=heavy, args=args, train_dataset=base.train_dataset, eval_dataset=base.eval_dataset,
                callbacks=[trial.hf_callback()]).train()

    result = search_own(base, "from_scratch", run=run, trials=12, progress=False, out=tmp_path / "out",
                        sampler=RandomSampler(design=0, seed_trial=False), pruner=Halving(evals=2), budget="4updates")
    assert max(rss[1:]) <= 1.05 * rss[1], [round(x / 2**20) for x in rss]
    assert len(list((tmp_path / "out" / "weights").glob("trial-*.pt"))) == 1
    user = hf_trainer("gpt2", tmp_path)  # the user's own Trainer, its model in hand
    result.load_best_into(user)
    best = result.trial()
    evaluated = user.evaluate()["eval_loss"]
    assert evaluated == pytest.approx(result.best_value, rel=1e-5), (best["number"], evaluated)


def test_the_callbacks_stop_a_pruned_trial(tmp_path: Any) -> None:
    from tunekit.hpsearch.backends.own import OwnTrial
    from tunekit.hpsearch.plan import TrialConfig
    from tunekit.integrations.callbacks import hf_callback, lightning_callback

    class Trial:  # an Optuna trial whose pruner always says stop
        number, params = 0, {}

        def report(self, value: float, step: int) -> None:
            self.reported = (value, step)

        def should_prune(self) -> bool:
            return True

    cfg = TrialConfig({"max_steps": 30, "batch_size": 8, "accumulation_steps": 1, "eval_every": 10}, {}, 80)
    own = OwnTrial(Trial(), cfg, prune=True)
    control = type("Control", (), {"should_training_stop": False})()
    hf_callback(own).on_evaluate(None, type("State", (), {"global_step": 10})(), control, metrics={"eval_loss": 1.5})
    assert control.should_training_stop and own.outcome(1.0).state == "PRUNED"
    lit = type("LitTrainer", (), {"sanity_checking": False, "global_step": 10, "should_stop": False,
                                  "callback_metrics": {"val_loss": torch.tensor(2.0)}})()
    lightning_callback(OwnTrial(Trial(), cfg, prune=True)).on_validation_end(lit, None)
    assert lit.should_stop


def test_when_a_run_evaluates_does_not_change_how_it_trains_on_a_model_with_dropout() -> None:
    """GPT-2's dropout draws from the global RNG; iterating a DataLoader without a generator draws its base seed
    from it too, and a loader with a seeded generator of its own advances with each run. The same config gives
    the same run, whether it evaluates every 3 updates or only at its end, first or second."""
    task = hf_task("gpt2")
    loader_state = task.train_data.generator.get_state()
    every = tunekit.train(task, run_steps=12, eval_every=3, progress=False)
    at_end = tunekit.train(task, run_steps=12, progress=False)
    assert every.losses == at_end.losses and every.final_loss == at_end.final_loss
    assert torch.equal(task.train_data.generator.get_state(), loader_state)  # the user's loader as it was


def test_advice_comes_in_the_objects_own_terms(tmp_path: Any) -> None:
    """What to fix, said as the user of each object fixes it: a Trainer's eval_dataset and compute_loss_func,
    a LightningRun for a lightning.Trainer, the package an optim= needs; Adafactor read as Adam-like."""
    import lightning as L

    no_eval = hf_trainer("gpt2", tmp_path, model_init=True)
    no_eval.eval_dataset = None
    with pytest.raises(UsageError, match="give the Trainer an eval_dataset") as caught:
        tunekit.search(no_eval, "from_scratch", **SEARCH)
    assert "the task val_data" not in str(caught.value)
    with pytest.raises(UsageError, match="LightningRun\\(module, datamodule, trainer\\)"):
        tunekit.lr_find(L.Trainer(logger=False, accelerator="cpu"), [1, 2], **LR_FIND)

    unlabelled = hf_trainer("gpt2", tmp_path)
    unlabelled.train_dataset = [{"input_ids": b["input_ids"]} for b in unlabelled.train_dataset]
    with pytest.raises(UsageError, match="compute_loss_func=") as caught:
        tunekit.lr_find(unlabelled, **LR_FIND)
    assert len(str(caught.value).splitlines()) == 1

    def lm_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss

    found = tunekit.lr_find(unlabelled, compute_loss=lm_loss, **LR_FIND)  # the caller's loss, taken
    assert found.suggestion is not None

    with pytest.raises(UsageError, match="optim='adamw_bnb_8bit'.*install it, or use optim='adamw_torch'"):
        tunekit.lr_find(hf_trainer("gpt2", tmp_path, optim="adamw_bnb_8bit"), **LR_FIND)
    adafactor = tunekit.lr_find(hf_trainer("gpt2", tmp_path, optim="adafactor"), **LR_FIND)
    assert adafactor.settings["optimizer"] == "Adafactor" and adafactor.settings["family"] == "adaptive"


@pytest.mark.parametrize("family", ["gpt2", "lightning"])
def test_the_doctor_and_lr_find_give_one_lr_for_one_object(family: str, tmp_path: Any) -> None:
    """The doctor's quick range test is lr_find's own sweep (its steps, clipping and rule): where lr_find does not
    refine (a run too short to pay for short runs), the two read the same LR off the curve, which lr_find then
    carries to its planned run's passes over the data."""
    from tunekit.probes.short_runs import from_curve

    obj, _ = their(family, tmp_path)
    checked = tunekit.doctor(obj, progress=False)
    quick = next(f for f in checked.items() if "suggestion" in f.evidence)
    found = tunekit.lr_find(their(family, tmp_path)[0], progress=False)
    assert found.refinement is None and quick.evidence["suggestion"] == pytest.approx(found.suggestions["tunekit"],
                                                                                       rel=1e-9)
    assert found.suggestion == pytest.approx(from_curve(found.suggestions["tunekit"], found.settings.run_passes))


def test_the_doctor_tells_a_trainer_the_lr_lr_find_gives_as_its_learning_rate(tmp_path: Any) -> None:
    """An LR far off is told to try lr_find's own answer (its short runs move the curve's 0.011 to 0.0065
    here), not the curve's, and in the Trainer's words: ``learning_rate=``, no CLI flag from Python."""
    checked = tunekit.doctor(hf_trainer("gpt2", tmp_path, max_steps=200, learning_rate=1.0), progress=False)
    (far,) = [f for f in checked.by_check("recipe") if f.status == "warn" and "lr 1 " in f.message]
    found = tunekit.lr_find(hf_trainer("gpt2", tmp_path, max_steps=200, learning_rate=1.0), progress=False)
    assert found.refinement is not None and found.suggestion != pytest.approx(far.evidence["suggestion"], rel=0.1)
    assert far.evidence["lr_find"] == pytest.approx(found.suggestion, rel=1e-9)
    assert far.fix.startswith(f"try learning_rate={found.suggestion:.2g} (lr_find's suggestion")
    assert "--" not in far.fix and "lr=" not in far.fix.replace("learning_rate=", "")


def test_a_task_function_returning_a_trainer_is_refused_in_its_terms_on_the_cli(tmp_path: Any, run_main: Any) -> None:
    spec = tmp_path / "their_task.py"
    spec.write_text("from tests.their_objects import hf_trainer\n\n\ndef no_eval():\n"
                    f"    t = hf_trainer('gpt2', {str(tmp_path)!r}, model_init=True)\n    t.eval_dataset = None\n    return t\n")
    code, _, err = run_main("search", "--task", f"{spec}:no_eval", "--trials", "2", "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith("give the Trainer an eval_dataset")
