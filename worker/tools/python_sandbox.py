"""One run's Python sandbox: a kernel process (worker/tools/kernel.py) inside bubblewrap.

Isolation is bubblewrap's (Debian package ``bubblewrap``): every namespace unshared (no network
but a loopback of its own, its own pids, its own mounts), only /usr mounted, read-only (no /etc,
no /home, no worker files), a fresh /proc and /dev, and a size-bounded tmpfs at /scratch as its
only writable folder (gone with the sandbox). Resource limits are rlimits set by prlimit just
before bubblewrap starts, so they bind the kernel too: address space (memory), CPU seconds over the sandbox's
life, file size, open files, and (when the worker runs as root, which lets it run each sandbox
under an unprivileged uid of its own) processes, so a fork bomb stops at a handful. Each call
has a wall limit; past it the sandbox is killed and the next call starts a fresh one.

Killing is by SIGKILL to bubblewrap: it runs the kernel with --die-with-parent in a pid
namespace, so the namespace's first process dies with it and the kernel of Linux kills every
process left in that namespace. Nothing the code started outlives the sandbox.

The sandbox starts on the run's first run_python call and is closed when the run's delivery
ends, however it ends (worker/run_delivery.py): finished, suspended for a person, cancelled,
released at shutdown, or past its deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from tickwork.worker.tools.kernel import KERNEL_SOURCE

# An answer line from the kernel holds at most the bounded output plus the bounded value.
LINE_SLACK = 64_000
# Unprivileged uids for sandboxes when the worker runs as root: one picked at random per
# sandbox, so each has its own process count (a collision only shares that bound).
UID_BASE, UID_SPAN = 200_000, 800_000


class SandboxUnavailable(RuntimeError):
    """This worker cannot start a sandbox (no bubblewrap, or it cannot create namespaces)."""


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 30.0  # one run_python call, tool calls from its code included
    cpu_seconds: int = 120  # CPU over the sandbox's whole life
    memory_mb: int = 512  # address space of each process in it
    max_processes: int = 16  # processes in it (enforced when the worker runs as root)
    max_output_chars: int = 100_000  # printed output kept per call; the rest is cut
    scratch_mb: int = 64  # the tmpfs at /scratch
    interpreter: str = ""  # the Python inside; "" picks /usr/bin/python3, else this one


# What a tool call from code is handed to: (name, arguments, the run_python call's tool_start
# seq, its harness id, the call's index in the cell) -> (ok, text, needs a person)
CallBridge = Callable[[str, dict[str, Any], int, str, int],
                      Awaitable[tuple[bool, str, bool]]]


def interpreter_of(limits: SandboxLimits) -> str:
    if limits.interpreter:
        return limits.interpreter
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def bwrap_argv(limits: SandboxLimits, info_fd: int | None = None) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("run_python needs bubblewrap (bwrap) on the worker's machine; "
                                 "it is not installed")
    python = interpreter_of(limits)
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/bin", "/bin",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--size", str(limits.scratch_mb << 20), "--tmpfs", "/scratch",
            "--chdir", "/scratch", "--setenv", "HOME", "/scratch"]
    if info_fd is not None:  # bwrap writes {"child-pid": …}: the pid namespace's first process
        argv += ["--info-fd", str(info_fd)]
    prefix = os.path.realpath(sys.base_prefix)
    if not python.startswith("/usr/") and not prefix.startswith("/usr"):
        argv += ["--ro-bind", prefix, prefix]  # an interpreter outside /usr brings its stdlib
    return argv + ["--", python, "-I", "-S", "-c", KERNEL_SOURCE,
                   str(limits.max_output_chars), str(limits.max_output_chars + LINE_SLACK)]


def prlimit_argv(limits: SandboxLimits, uid: int | None) -> list[str]:
    """util-linux's prlimit sets the limits, then (for a root worker) setpriv takes a uid of
    the sandbox's own, then bubblewrap runs, passing both on to the kernel. No preexec_fn:
    forking from a worker with threads must not run Python code, and uvloop (the worker's
    loop) takes no user/group arguments."""
    prlimit, setpriv = shutil.which("prlimit"), shutil.which("setpriv")
    if prlimit is None or (uid is not None and setpriv is None):
        raise SandboxUnavailable("run_python needs prlimit and setpriv (util-linux) on the "
                                 "worker's machine")
    cpu = limits.cpu_seconds
    argv = [prlimit, f"--as={limits.memory_mb << 20}", f"--cpu={cpu}:{cpu + 1}",
            f"--fsize={limits.scratch_mb << 20}", "--nofile=256", "--core=0"]
    if uid is not None:  # root ignores RLIMIT_NPROC: the sandbox runs under a uid of its own
        argv += [f"--nproc={limits.max_processes}", "--", str(setpriv), f"--reuid={uid}",
                 f"--regid={uid}", "--clear-groups"]
    return argv + ["--"]


class PythonSandbox:
    """One kept kernel for one run; call ``run`` for each cell, ``close`` when the run ends."""

    def __init__(self, limits: SandboxLimits, bridge: CallBridge | None = None,
                 cancelled: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.limits = limits
        self.bridge = bridge
        # A person's cancel, asked every cancel_poll_seconds while a cell runs: the code makes
        # no journal append that would learn it, and a cell may run for its whole wall limit.
        self.cancelled = cancelled
        self.cancel_poll_seconds = 1.0
        self._proc: asyncio.subprocess.Process | None = None
        self._init: int | None = None  # the sandbox's pid namespace's first process (host pid)
        self._lock = asyncio.Lock()
        self._closed = False
        self._ended = False  # a sandbox of this run was killed: the next start is a restart
        self.started_seconds: float | None = None  # how long the last start took

    @property
    def pid(self) -> int | None:
        """bubblewrap's pid (the kernel runs below it), while the sandbox is up."""
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        if self._closed:
            raise SandboxUnavailable("the run has ended; its sandbox is closed")
        started = time.perf_counter()
        uid = UID_BASE + secrets.randbelow(UID_SPAN) if os.geteuid() == 0 else None
        info_read, info_write = os.pipe()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *prlimit_argv(self.limits, uid), *bwrap_argv(self.limits, info_write),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
                pass_fds=(info_write,), limit=self.limits.max_output_chars * 6 + LINE_SLACK)
        except (OSError, SandboxUnavailable) as exc:
            os.close(info_read)
            if isinstance(exc, SandboxUnavailable):
                raise
            raise SandboxUnavailable(f"the sandbox could not start: {exc}") from None
        finally:
            os.close(info_write)
        ready = await self._read(timeout=self.limits.wall_seconds)
        try:  # written before the kernel ran, so there once it said ready
            os.set_blocking(info_read, False)
            self._init = int(json.loads(os.read(info_read, 4096) or b"{}").get("child-pid", 0))
        except (OSError, ValueError, AttributeError):
            self._init = None
        finally:
            os.close(info_read)
        if ready is None or ready.get("op") != "ready":
            await self._stop()
            raise SandboxUnavailable("the sandbox could not start (bubblewrap refused to create "
                                     "its namespaces, or the interpreter did not run)")
        self.started_seconds = time.perf_counter() - started

    async def run(self, code: str, parent: int = 0, call_id: str = "code") -> dict[str, Any]:
        """Run one cell; tool calls from it go to the bridge with ``parent`` (the run_python
        call's tool_start seq). Past the wall limit the sandbox is killed and says so."""
        async with self._lock:
            restarted = self._ended
            if self._proc is None or self._proc.returncode is not None:
                await self.start()
                self._ended = False
            watch = asyncio.create_task(self._watch_cancel()) if self.cancelled else None
            try:
                async with asyncio.timeout(self.limits.wall_seconds):
                    result = await self._cell(code, parent, call_id)
                if watch is not None and watch.done() and watch.result():
                    result = {"error": "stopped: a person cancelled the run; the sandbox was "
                                       "killed", "killed": True}
                if restarted:  # the last one was killed by a limit: its variables are gone
                    result["restarted"] = True
                return result
            except TimeoutError:
                await self._stop()
                return {"error": f"stopped: the code ran past the wall limit of "
                                 f"{self.limits.wall_seconds:g} s; the sandbox was restarted "
                                 "and its variables are gone", "killed": True}
            finally:
                if watch is not None:
                    watch.cancel()

    async def _watch_cancel(self) -> bool:
        assert self.cancelled is not None
        while True:
            await asyncio.sleep(self.cancel_poll_seconds)
            try:
                stop = await self.cancelled()
            except Exception:  # a failed check is not a cancel; the wall limit still holds
                stop = False
            if stop:
                self.kill()  # the cell's read sees the end and returns
                return True

    async def _cell(self, code: str, parent: int, call_id: str) -> dict[str, Any]:
        self._write({"op": "run", "code": code})
        calls, not_run = 0, []
        while True:
            message = await self._read()
            if message is None:  # the kernel died: a limit (memory, CPU, processes) or a crash
                await self._stop()
                return {"error": "stopped: the sandbox's process ended (a CPU, memory or process "
                                 "limit, or a crash); it is restarted on the next call and its "
                                 "variables are gone", "killed": True}
            if message.get("op") == "done":
                result = {k: v for k, v in message.items() if k != "op"}
                result["tool_calls"] = calls
                if not_run:  # the model is told, whatever the code did with the exception
                    result["needs_approval_not_run"] = not_run[:20]
                    result["note"] = ("calls that need a person's approval cannot run from code; "
                                      "call those tools directly so a person can approve them")
                return result
            if message.get("op") == "call":
                calls += 1
                ok, text, approval = await self._call(message, parent, call_id, calls)
                if approval:
                    not_run.append({"tool": message.get("name"),
                                    "arguments": message.get("arguments")})
                self._write({"op": "answer", "ok": ok, "result": text, "approval": approval})

    async def _call(self, message: dict[str, Any], parent: int, call_id: str,
                    index: int) -> tuple[bool, str, bool]:
        name, arguments = message.get("name"), message.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return False, json.dumps({"error": "tools.call(name, **arguments)"}), False
        if self.bridge is None:
            return False, json.dumps({"error": "no tools can be called from this sandbox"}), False
        return await self.bridge(name, arguments, parent, call_id, index)

    def _write(self, message: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write((json.dumps(message, default=str) + "\n").encode())

    async def _read(self, timeout: float | None = None) -> dict[str, Any] | None:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            async with asyncio.timeout(timeout):
                line = await self._proc.stdout.readline()
            return json.loads(line) if line else None
        except (ValueError, asyncio.LimitOverrunError, TimeoutError):
            return None  # a line past the bound or not the protocol: treated as a dead kernel

    def kill(self) -> None:
        """SIGKILL the pid namespace's first process (the kernel of Linux then kills every
        process in the namespace) and bubblewrap; ``_stop`` also waits for them to be gone."""
        for pid in (self._init, self._proc.pid if self._proc else None):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    async def _stop(self) -> None:
        proc, init = self._proc, self._init
        self.kill()
        self._proc, self._init = None, None
        self._ended = proc is not None
        if proc is None:
            return
        try:
            async with asyncio.timeout(5):
                await proc.wait()
                # bubblewrap reaps the namespace's first process, which ends only once every
                # process in its namespace has; wait for that too (it is not our child).
                while init and _alive(init):
                    await asyncio.sleep(0.01)
        except TimeoutError:
            pass

    async def close(self) -> None:
        """Kill the sandbox and wait until its processes are gone; no call starts another."""
        self._closed = True
        await self._stop()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False
