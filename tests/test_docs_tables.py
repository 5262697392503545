"""Generated sections of README (harness/docs_tables.py) match the committed JSON they come from."""

from minispec.harness import docs_tables


def test_readme_sections_match_their_json():
    assert docs_tables.main(["--check"]) == 0, "run: python -m minispec.harness.docs_tables"


def test_an_edited_figure_is_caught():
    text = (docs_tables.ROOT / "README.md").read_text()
    start = text.index("<!-- generated: level4 -->")
    end = text.index("<!-- end: level4 -->")
    section = text[start:end]
    assert "| " in section, "the level-4 table is empty"
    edited = text[:start] + section.replace(" min |", "0 min |", 1) + text[end:]  # one figure changed by hand
    assert edited != text and docs_tables.render(edited) == text
