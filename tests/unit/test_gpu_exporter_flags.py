"""The GPU exporter's settings are checked at start, and an error names what the user set (issue 27,
item 13): GPU_EXPORTER_ADDRESS=abc used to reach the listen call and blame --port.

    make test-unit PYTEST_ARGS=tests/unit/test_gpu_exporter_flags.py

NVML is not what these tests check: where nvidia-ml-py is not installed (the unit tier's venv), an
empty module stands in for it, and start_nvml is replaced by "no driver". tests/monitoring runs the
real exporter in the image.
"""
from __future__ import annotations

import errno
import socket
import sys
import types

import pytest

sys.modules.setdefault("pynvml", types.ModuleType("pynvml"))  # only its import; nothing here calls NVML
pytest.importorskip("prometheus_client")
import gpu_exporter  # noqa: E402


def error_line(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        gpu_exporter.parse_args(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_bad_address_from_the_container_names_the_variable(capsys, monkeypatch):
    monkeypatch.setenv("GPU_EXPORTER_ADDRESS", "abc")
    assert error_line(capsys, ["--address", "abc"]) == (
        "gpu_exporter.py: error: GPU_EXPORTER_ADDRESS='abc' (passed as --address): must be an IP address such "
        "as 0.0.0.0 or 127.0.0.1, got 'abc' (see --help)")
    assert "GPU_EXPORTER_ADDRESS='abc'" in error_line(capsys, [])  # the variable is the flag's default


def test_a_bad_flag_by_hand_names_the_flag(capsys, monkeypatch):
    monkeypatch.delenv("GPU_EXPORTER_ADDRESS", raising=False)
    monkeypatch.delenv("GPU_EXPORTER_PORT", raising=False)
    assert error_line(capsys, ["--address", "abc"]).startswith("gpu_exporter.py: error: argument --address: must be")
    monkeypatch.setenv("GPU_EXPORTER_PORT", "x")
    assert error_line(capsys, []).startswith("gpu_exporter.py: error: GPU_EXPORTER_PORT='x' (passed as --port): ")


def test_a_taken_port_blames_the_port_and_a_foreign_address_the_address(capsys, monkeypatch):
    monkeypatch.setattr(gpu_exporter, "start_nvml", lambda: False)

    class ServesForever:  # main() waits on this once it serves: here that is a failure, not a hang
        def wait(self) -> None:
            raise AssertionError("the exporter listened where it should have refused")
    monkeypatch.setattr(gpu_exporter, "threading", types.SimpleNamespace(Event=ServesForever))
    monkeypatch.setenv("GPU_EXPORTER_PORT", "1")  # only a variable that holds the value is named
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert gpu_exporter.main(["--address", "127.0.0.1", "--port", str(port)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"gpu_exporter: error: --port {port}: cannot listen on 127.0.0.1:{port} (Address already in use); "
        "another process holds it: pick another port")
    foreign = address_of_no_interface()
    monkeypatch.setenv("GPU_EXPORTER_ADDRESS", foreign)
    assert gpu_exporter.main(["--address", foreign, "--port", "9400"]) == 2
    assert capsys.readouterr().err.strip().startswith(
        f"gpu_exporter: error: GPU_EXPORTER_ADDRESS={foreign}: cannot listen on {foreign}:9400 (Cannot assign "
        "requested address); give an address of this host, or 0.0.0.0")


def address_of_no_interface() -> str:
    """A documentation address (RFC 5737) this host cannot bind; some machines route one of them locally."""
    for address in ("203.0.113.7", "198.51.100.7", "192.0.2.7"):
        with socket.socket() as probe:
            try:
                probe.bind((address, 0))
            except OSError as error:
                if error.errno == errno.EADDRNOTAVAIL:
                    return address
    pytest.skip("every documentation address binds on this host")
