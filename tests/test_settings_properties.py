"""Property tests of the search's settings: any value given to any field of the objects a search
takes gives an object or one UsageError line, never another exception."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunekit.errors import UsageError
from tunekit.hpsearch.options import CONCEPTS
from tunekit.hpsearch.settings import SearchSettings

# Any value a user might pass: numbers of every kind (bool, nan, inf), text, None, containers.
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(max_size=12), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4),
                                                                                               st.integers(), max_size=2))
CLASSES = [cls for _, classes in CONCEPTS.values() for cls in classes.values()]


def _one_line_or_made(make):  # type: ignore[no-untyped-def]
    try:
        return make()
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc), repr(str(exc))
        return None


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_field_value_gives_an_object_or_one_line(cls: type, data: st.DataObject) -> None:
    fields = [f.name for f in dataclasses.fields(cls)]
    chosen = data.draw(st.lists(st.sampled_from(fields), unique=True, max_size=3)) if fields else []
    values = {name: data.draw(VALUES) for name in chosen}
    _one_line_or_made(lambda: cls(**values))


@settings(max_examples=150, deadline=None)
@given(trials=VALUES, budget=VALUES, seed=VALUES, keep=VALUES, objective=VALUES)
def test_any_search_setting_gives_settings_or_one_line(trials, budget, seed, keep, objective) -> None:  # type: ignore[no-untyped-def]
    made = _one_line_or_made(lambda: SearchSettings(trials=trials, budget=budget, seed=seed, keep=keep,
                                                    objective=objective))
    if made is not None:  # what is accepted is usable: whole counts, a seed for the sampler, a direction
        assert isinstance(made.trials, int) and made.trials >= 1 and not isinstance(made.trials, bool)
        assert isinstance(made.sampler_seed, int) and made.objective.direction in ("minimize", "maximize")
