"""The serial phase's list (tests/conftest.py) names tests that exist: a misspelt or renamed one would run
in the parallel phase unnoticed, beside the others, with its timers and kills."""

from pathlib import Path

from .conftest import SERIAL_FILES, SERIAL_TESTS

HERE = Path(__file__).parent


def test_every_serial_name_is_a_test_of_this_suite() -> None:
    sources = "\n".join(p.read_text() for p in HERE.glob("test_*.py"))
    assert [n for n in SERIAL_TESTS if f"def {n}(" not in sources] == []
    assert [f for f in SERIAL_FILES if not (HERE / f).is_file()] == []
