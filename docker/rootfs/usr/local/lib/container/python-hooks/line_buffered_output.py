"""stdout and stderr of the image's Python, a line at a time, into a terminal, a pipe or a file alike.

Each line is out the moment it ends, in one write, so the lines of processes sharing a log (torchrun's
ranks, the container's services, a tee) stay whole. Python otherwise buffers stdout into a pipe in 8 KiB
blocks (a line shows late), and unbuffered (python -u, which torchrun gives every worker, or
PYTHONUNBUFFERED=1) writes each print as two writes, its text and then its newline, between which another
process's line lands. A flush() still writes a partial line at once.

Run at every start of the image's Python by line-buffered-output.pth, which the Dockerfile links into its
site-packages beside this file.
"""
import io
import sys


def write_whole_lines():
    for stream in (sys.stdout, sys.stderr):
        # Only Python's own text streams: a stream put in their place (a notebook's) buffers its own way.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(write_through=False, line_buffering=True)
