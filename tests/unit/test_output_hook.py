"""The hook that makes every Python of the image write stdout and stderr a line at a time
(docker/rootfs/usr/local/lib/container/python-hooks/line_buffered_output.py; in the image,
tests/image/test_python_output.py)."""
from __future__ import annotations

import io

import line_buffered_output


class NotebookStream(io.StringIO):
    """A stream put in place of Python's own, as a notebook's is: it buffers its own way."""
    reconfigured = False

    def reconfigure(self, **settings) -> None:
        self.reconfigured = True


def test_the_hook_makes_pythons_own_streams_write_whole_lines(monkeypatch) -> None:
    unbuffered = io.TextIOWrapper(io.BytesIO(), write_through=True)  # as python -u makes stdout
    notebook_stream = NotebookStream()
    monkeypatch.setattr("sys.stdout", unbuffered)
    monkeypatch.setattr("sys.stderr", notebook_stream)
    line_buffered_output.write_whole_lines()
    assert unbuffered.line_buffering and not unbuffered.write_through
    assert not notebook_stream.reconfigured
