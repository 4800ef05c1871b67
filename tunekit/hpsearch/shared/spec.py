"""A shared study's spec: what every worker must agree on, as one typed record.

The creator stores it (:data:`~tunekit.hpsearch.keys.SPEC_KEY`) once its probes have run; joining
workers read it back, take its settings and probes, and refuse a setting that disagrees. Stored
flat, as JSON, as tunekit always has, so studies created before still join.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["StoredSpec"]

# The record's own keys in the stored JSON; every other key is one of the settings' study fields.
_OWN = ("version", "task", "space", "splits", "lr_find", "probe", "seed_params")


@dataclass(frozen=True)
class StoredSpec:
    """The study's settings, task and space, each batch's split, the probes' results and the seed trial."""

    version: Optional[str]  # the tunekit that created the study
    task: Optional[str]  # the task's spec (None: the study was created with a Task object)
    space: dict[str, Any]  # the search space (workers.space_dict / space_of)
    settings: dict[str, Any]  # SearchSettings.study_dict(): trials, budget, seed, sampler, objective, task_config...
    splits: dict[str, list[int]] = field(default_factory=dict)  # batch -> its micro-batch split
    lr_find: Optional[dict[str, Any]] = None  # the range test's result (LRFindResult.to_dict)
    probe: Optional[dict[str, Any]] = None  # the batch probe's result (ProbeResult.to_dict)
    seed_params: dict[str, Any] = field(default_factory=dict)  # the seed trial the creator queued
    held: Optional[frozenset[str]] = field(default=None, compare=False)  # an older spec's keys (None: all of them)

    def holds(self, key: str) -> bool:
        """Whether the study's spec holds ``key`` (an older tunekit's lacks the later ones)."""
        return (key in _OWN or key in self.settings) if self.held is None else key in self.held

    def value(self, key: str) -> Any:
        """The value under ``key``: one of the record's own, or a setting."""
        return getattr(self, key) if key in _OWN else self.settings.get(key)

    @property
    def seed(self) -> int:
        return int(self.settings["seed"])

    @property
    def sampler_seed(self) -> int:
        return int(self.settings["sampler_seed"])

    def with_seed(self, seed_params: dict[str, Any]) -> StoredSpec:
        """The spec with the seed trial the creator queued (known only once it is queued)."""
        return dataclasses.replace(self, seed_params=dict(seed_params))

    def to_stored(self) -> dict[str, Any]:
        """The JSON the study keeps (flat: the settings beside the record's own keys)."""
        out = {"version": self.version, "task": self.task, "space": self.space, **self.settings, "splits": self.splits,
               "lr_find": self.lr_find, "probe": self.probe, "seed_params": self.seed_params}
        return json.loads(json.dumps(out, default=str))

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> StoredSpec:
        """The record from the study's JSON (an older tunekit's spec lacks the later keys)."""
        return cls(stored.get("version"), stored.get("task"), dict(stored.get("space") or {}),
                   {k: v for k, v in stored.items() if k not in _OWN}, dict(stored.get("splits") or {}),
                   stored.get("lr_find"), stored.get("probe"), dict(stored.get("seed_params") or {}), frozenset(stored))
