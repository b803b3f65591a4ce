from pathlib import Path

from fleet.docs import END, START, reference

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_spec_reference_is_generated_from_the_models():
    text = README.read_text()
    assert text.split(START, 1)[1].split(END, 1)[0] == "\n" + reference(), "run: python -m fleet.docs --write"


def test_readme_shows_the_two_commands():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
