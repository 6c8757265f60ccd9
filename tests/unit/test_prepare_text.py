"""prepare_text.py never destroys its input and reports a broken tokenizer in one line (issue 27, item 9).

    make test-unit PYTEST_ARGS=tests/unit/test_prepare_text.py
"""
from __future__ import annotations

import os
import pathlib

import pytest

import prepare_text

TEXT = "the text that must survive\n"


def one_error_line(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        prepare_text.main(argv)
    assert exit_info.value.code != 0
    errors = capsys.readouterr().err.strip().splitlines() or [str(exit_info.value.code)]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("output", ["same name", "relative detour", "symbolic link", "hard link", "link by a detour"])
def test_an_output_that_names_the_input_is_refused_and_the_text_kept(tmp_path, monkeypatch, capsys, output):
    monkeypatch.chdir(tmp_path)
    text = pathlib.Path("book.txt")
    text.write_text(TEXT)
    pathlib.Path("sub").mkdir()
    target = {"same name": "book.txt", "relative detour": "sub/../book.txt", "symbolic link": "link.bin",
              "hard link": "hard.bin", "link by a detour": "detour.bin"}[output]
    if output == "symbolic link":
        os.symlink("book.txt", "link.bin")
    elif output == "hard link":
        os.link("book.txt", "hard.bin")
    elif output == "link by a detour":  # a link whose path to the text goes through another folder
        os.symlink(str(tmp_path / "sub" / ".." / "book.txt"), "detour.bin")
    line = one_error_line(capsys, [str(text), target])
    assert f"the output {target} is the text book.txt itself; name another file, e.g. book.tokens.bin" in line
    assert text.read_text() == TEXT


def test_another_output_is_written(tmp_path):
    (tmp_path / "book.txt").write_text(TEXT)
    assert prepare_text.main([str(tmp_path / "book.txt"), str(tmp_path / "book.bin")]) == 0
    assert (tmp_path / "book.bin").stat().st_size == 2 * len(TEXT)


@pytest.mark.parametrize("files, reason", [
    ({"tokenizer.json": "{not json"}, "cannot read the tokenizer's tokenizer.json in"),
    ({"tokenizer.json": "[]"}, "cannot read the tokenizer's tokenizer.json in"),
    ({"vocab.json": '{"a": 0}', "merges.txt": "#version: 0.2\na b c d e\n"}, "vocab.json and merges.txt in"),
    ({"vocab.json": "{not json", "merges.txt": ""}, "vocab.json and merges.txt in"),
])
def test_a_broken_tokenizer_is_one_line(tmp_path, capsys, files, reason):
    pytest.importorskip("tokenizers")
    (tmp_path / "book.txt").write_text(TEXT)
    (tmp_path / "tokenizer").mkdir()
    for name, content in files.items():
        (tmp_path / "tokenizer" / name).write_text(content)
    line = one_error_line(capsys, [str(tmp_path / "book.txt"), str(tmp_path / "out.bin"),
                                   "--tokenizer", str(tmp_path / "tokenizer")])
    assert line.startswith("prepare_text.py: error: ") and reason in line, line
    assert not (tmp_path / "out.bin").exists()
