"""A PNG of the loss curves, this image against the baseline, with only the standard library (zlib):
the host that runs the gate needs no matplotlib, and a CI job attaches the file as it is.

One panel per reference run, side by side, in run order: the baseline in grey, this image in blue, or
in red where that run's loss check failed. The numbers themselves are in the JSON report beside it.
"""
from __future__ import annotations

import pathlib
import struct
import zlib

PANEL_W, PANEL_H, MARGIN = 320, 200, 16
WHITE, FRAME, GREY, BLUE, RED = (255, 255, 255), (90, 90, 90), (170, 170, 170), (31, 119, 180), (214, 39, 40)


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(WHITE) * width * height)

    def dot(self, x: int, y: int, color: tuple[int, int, int], size: int = 1) -> None:
        for dx in range(size):
            for dy in range(size):
                px, py = x + dx, y + dy
                if 0 <= px < self.width and 0 <= py < self.height:
                    offset = 3 * (py * self.width + px)
                    self.pixels[offset:offset + 3] = bytes(color)

    def line(self, start: tuple[float, float], end: tuple[float, float], color: tuple[int, int, int],
             size: int = 2) -> None:
        steps = int(max(abs(end[0] - start[0]), abs(end[1] - start[1]))) + 1
        for i in range(steps + 1):
            t = i / steps
            self.dot(round(start[0] + t * (end[0] - start[0])), round(start[1] + t * (end[1] - start[1])), color, size)

    def rectangle(self, left: int, top: int, right: int, bottom: int, color: tuple[int, int, int]) -> None:
        for corner_a, corner_b in (((left, top), (right, top)), ((right, top), (right, bottom)),
                                   ((right, bottom), (left, bottom)), ((left, bottom), (left, top))):
            self.line(corner_a, corner_b, color, size=1)

    def png(self) -> bytes:
        rows = b"".join(b"\x00" + bytes(self.pixels[3 * y * self.width:3 * (y + 1) * self.width])
                        for y in range(self.height))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def draw_panel(canvas: Canvas, left: int, curves: list[tuple[dict[str, float], tuple[int, int, int]]]) -> None:
    top, right, bottom = MARGIN, left + PANEL_W - MARGIN, PANEL_H - MARGIN
    canvas.rectangle(left + MARGIN, top, right, bottom, FRAME)
    points = [(int(step), loss) for losses, _ in curves for step, loss in losses.items()]
    if not points:
        return
    x_low, x_high = min(x for x, _ in points), max(x for x, _ in points)
    y_low, y_high = min(y for _, y in points), max(y for _, y in points)
    x_span, y_span = (x_high - x_low) or 1, (y_high - y_low) or 1

    def place(step: int, loss: float) -> tuple[float, float]:
        inner_left, inner_w, inner_h = left + 2 * MARGIN, PANEL_W - 4 * MARGIN, PANEL_H - 4 * MARGIN
        return (inner_left + (step - x_low) / x_span * inner_w, 2 * MARGIN + (y_high - loss) / y_span * inner_h)
    for losses, color in curves:
        placed = [place(int(step), loss) for step, loss in losses.items()]
        for start, end in zip(placed, placed[1:]):
            canvas.line(start, end, color)


def write_loss_plot(path: pathlib.Path, runs: list[tuple[dict[str, float], dict[str, float], bool]]) -> None:
    """Writes PATH: one panel per (measured losses, baseline losses, loss check passed), step -> loss."""
    canvas = Canvas(PANEL_W * max(len(runs), 1), PANEL_H)
    for index, (measured, baseline, passed) in enumerate(runs):
        draw_panel(canvas, index * PANEL_W, [(baseline, GREY), (measured, BLUE if passed else RED)])
    path.write_bytes(canvas.png())
