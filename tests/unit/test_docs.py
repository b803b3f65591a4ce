"""The docs: the spec reference (docs/spec.md) is generated from the models and current; the README starts where
an operator starts and stays short; every relative link in them leads somewhere."""

import re
from pathlib import Path

import pytest

from fleet.spec import docs
from fleet.spec.docs import END, SPEC_MD, START, is_current, reference, rewrite

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# docs/ARCHITECTURE.md is left out of the line rule: its map is a table, a row per package of fleet/ on one line
WRAPPED = [README, *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "ARCHITECTURE.md")]
LINK = re.compile(r"\]\(([^)\s]+)\)")
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
MAP_ROW = re.compile(r"\| `([^`]+)` \| (.*) \|")
# a fleet path written out (a directory ends in /), and a file named bare in its package's row
FLEET_PATH = re.compile(r"(?<![\w/.])fleet/(?:[\w-]+/)*(?:[\w-]+\.(?:py|sh))?")
FILE_NAME = re.compile(r"`([\w-]+\.(?:py|sh))`")


def test_the_spec_reference_is_generated_from_the_models():
    assert SPEC_MD == ROOT / "docs" / "spec.md"
    text = SPEC_MD.read_text()
    assert text.count(START) == 1 and text.count(END) == 1
    assert text.split(START, 1)[1].split(END, 1)[0] == "\n" + reference(), "run: python -m fleet.spec.docs --write"
    assert is_current()


def test_the_reference_names_every_key_of_every_section():
    ref = reference()
    for title, model in docs.SECTIONS + docs.MORE_SECTIONS:
        section = ref.split(f"### `{title}`\n", 1)[1].split("\n### ", 1)[0]
        for name in model.model_fields:
            assert f"\n- `{name}` (" in section, (title, name)
    for name in docs.ClassSpec.model_fields:
        assert f"\n- `{name}` (" in ref.split("### Top-level names", 1)[1], name


def test_a_stale_reference_is_found_and_rewritten(tmp_path, monkeypatch):
    stale = SPEC_MD.read_text().replace("- `gpu_count` (", "- `gpu_count_was_renamed` (", 1)
    spec = tmp_path / "spec.md"
    spec.write_text(stale)
    assert not is_current(spec)
    assert rewrite(spec) is True and is_current(spec)
    assert rewrite(spec) is False
    assert spec.read_text() == SPEC_MD.read_text()  # the hand-written header and the tail are kept
    # a field whose description changes in fleet/spec.py makes the file stale
    field = docs.GpuClass.model_fields["gpu_count"]
    monkeypatch.setattr(field, "description", field.description + " Changed.")
    assert not is_current(spec)


def test_a_missing_reference_is_made_with_its_header(tmp_path):
    spec = tmp_path / "spec.md"
    assert not is_current(spec)
    assert rewrite(spec) is True
    assert spec.read_text().startswith("# Spec reference\n") and is_current(spec)


def test_the_reference_is_wrapped_and_opens_no_block_mid_entry():
    for line in reference().splitlines():
        assert len(line) <= 130, line
        if line.startswith("  "):  # a continuation of a list entry: never a new list item, heading or table
            assert not re.match(r"\s+([-+*>#|]\s|\d+[.)]\s)", line), line


def test_readme_starts_where_an_operator_starts():
    text = README.read_text()
    assert len(text.splitlines()) < 250
    first_screen = text[:text.index("## Your own fleet")]
    assert "make demo" in first_screen and "make test" in first_screen
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[:3] == ["Try it", "Your own fleet in six steps", "Day 2"]
    six = text.split("## Your own fleet in six steps", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\*\*(\d)\. ", six, re.M)
    assert steps == list("123456")
    for command in ("inventory.py", "group_data/<class>.py", "make check", "make dry", "make deploy",
                    "make verify", "make status"):
        assert command in six, command
    assert START not in text  # the reference lives in docs/spec.md


@pytest.mark.parametrize("path", WRAPPED, ids=lambda p: p.name)
def test_no_line_is_over_300_characters(path):
    long = [n for n, line in enumerate(path.read_text().splitlines(), 1) if len(line) >= 300]
    assert not long, f"{path.name}: lines {long} (wrap prose at ~110 characters)"


@pytest.mark.parametrize("path", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_lead_to_files_and_headings(path):
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{path.name}: {target}"
        if anchor:
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}
            assert anchor in slugs, f"{path.name}: {target} (headings: {sorted(slugs)})"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _named_in_the_map() -> set[str]:
    """The fleet paths docs/ARCHITECTURE.md's map (its table `| path | what it is |`) names: a package's row (its
    directory, which stands for its __init__.py) with the files it lists by name, and every fleet path written out."""
    lines = ARCHITECTURE.read_text().splitlines()
    named = set()
    for line in lines[lines.index("| path | what it is |") + 2:]:
        if not line.startswith("|"):
            break
        path, said = MAP_ROW.fullmatch(line).groups()
        if path.startswith("fleet/"):
            named.add(path)
            named.update(path + name for name in FILE_NAME.findall(said))
        named.update(FLEET_PATH.findall(said))
    return named


def test_the_architecture_map_names_every_file_of_fleet():
    named = _named_in_the_map()
    files = [p.relative_to(ROOT) for p in sorted((ROOT / "fleet").rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts and (p.suffix == ".py" or p.parent.name == "programs")]
    unnamed = [str(f) for f in files
               if str(f) not in named and not (f.name == "__init__.py" and f"{f.parent}/" in named)]
    assert not unnamed, "docs/ARCHITECTURE.md's map: name each in its package's row"


def test_every_fleet_path_the_architecture_map_names_exists():
    missing = sorted(path for path in _named_in_the_map() if not (ROOT / path).exists())
    assert not missing, "docs/ARCHITECTURE.md's map names them; they are not in fleet/"
