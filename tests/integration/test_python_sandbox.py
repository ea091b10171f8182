"""run_python's sandbox, escape by escape (RELIABILITY S8): real bubblewrap, real processes.

Each test starts a kernel and tries one way out: the network, the host's files, processes,
CPU, memory, output; and the sandbox's life: kept state, the last expression's value, and
nothing left behind once it is closed.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from tickwork.worker.tools.python_sandbox import PythonSandbox, SandboxLimits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is installed by .ci/run")


def descendants(pid: int) -> set[int]:
    """Live processes below pid (from /proc: the sandbox's bwrap, its kernel, their children)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue
            if state != "Z":
                children.setdefault(int(ppid), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
async def box():
    sandbox = PythonSandbox(SandboxLimits(wall_seconds=20, max_output_chars=10_000,
                                          memory_mb=256, max_processes=8))
    yield sandbox
    await sandbox.close()


async def test_variables_persist_between_calls_and_the_last_expression_comes_back(box):
    first = await box.run("records = [1, 2, 3]\nprint('seen', len(records))\nsum(records)")
    assert (first["stdout"], first["value"], first["error"]) == ("seen 3\n", 6, None)
    second = await box.run("records.append(4)\nrecords")
    assert second["value"] == [1, 2, 3, 4]
    assert (await box.run("class A: pass\nA()"))["value"].startswith("<__main__.A object")


async def test_an_error_in_the_code_comes_back_as_its_traceback(box):
    result = await box.run("x = 1\n1 / 0")
    assert "ZeroDivisionError: division by zero" in result["error"]
    assert (await box.run("x"))["value"] == 1


async def test_no_network_a_loopback_server_on_the_host_is_unreachable(box):
    accepted = []

    async def on_connect(reader, writer):
        accepted.append(True)
        writer.close()
    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        result = await box.run(
            "import socket\ns = socket.socket()\ns.settimeout(3)\n"
            f"s.connect(('127.0.0.1', {port}))")
        assert "ConnectionRefusedError" in result["error"]
        # Nor any other interface: the sandbox has only a loopback of its own.
        names = await box.run("import socket\nsocket.if_nameindex()")
        assert [name for _, name in names["value"]] == ["lo"]
    finally:
        server.close()
        await server.wait_closed()
    assert accepted == []


async def test_no_host_files_only_usr_read_only_and_its_own_scratch(box):
    here = Path(__file__).resolve()
    result = await box.run(
        "import os\n"
        f"(sorted(os.listdir('/')), os.path.exists('/etc/passwd'), os.path.exists({str(here)!r}),"
        " os.path.exists('/root'))")
    assert result["value"] == [["bin", "dev", "lib", "lib64", "proc", "scratch", "tmp", "usr"],
                               False, False, False]
    wrote = await box.run("open('/scratch/notes.txt', 'w').write('kept')\n"
                          "open('/scratch/notes.txt').read()")
    assert wrote["value"] == "kept"
    readonly = await box.run("open('/usr/evil', 'w')")
    assert "Read-only file system" in readonly["error"] or "Permission" in readonly["error"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the process limit needs a uid of its own")
async def test_a_fork_bomb_stops_at_the_process_limit(box):
    result = await box.run(
        "import os, time\nmade = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        made += 1\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
        "made")
    assert result["stdout"] == "BlockingIOError\n"
    assert result["value"] < 8
    pid = box.pid
    assert len(descendants(pid)) < 12  # bwrap, its init, the kernel and the few forks
    await box.close()
    assert descendants(pid) == set() and not alive(pid)


async def test_an_infinite_loop_is_killed_at_the_wall_limit_and_says_so():
    sandbox = PythonSandbox(SandboxLimits(wall_seconds=1))
    try:
        await sandbox.run("kept = 1")
        pid = sandbox.pid
        result = await sandbox.run("while True:\n    pass")
        assert result["killed"] is True
        assert "ran past the wall limit of 1 s" in result["error"]
        assert not alive(pid)
        # The next call gets a fresh sandbox, and is told its variables are gone.
        after = await sandbox.run("'kept' in globals()")
        assert (after["value"], after["restarted"]) == (False, True)
    finally:
        await sandbox.close()


async def test_cpu_past_its_limit_ends_the_sandbox_even_within_the_wall():
    sandbox = PythonSandbox(SandboxLimits(wall_seconds=60, cpu_seconds=1))
    try:
        result = await sandbox.run("while True:\n    pass")
        assert result["killed"] is True and "CPU, memory or process limit" in result["error"]
    finally:
        await sandbox.close()


async def test_allocating_without_bound_meets_the_memory_limit(box):
    result = await box.run("hoard = []\nwhile True:\n    hoard.append(bytearray(16 << 20))")
    assert "MemoryError" in result["error"]
    assert (await box.run("del hoard\n'still here'"))["value"] == "still here"


async def test_an_output_flood_is_cut_at_the_output_limit(box):
    result = await box.run("for i in range(200_000):\n    print('x' * 100)\n'done'")
    assert result["truncated"] is True
    assert len(result["stdout"]) == 10_000
    assert result["value"] == "done"
    # Writing to the real stdout fd cannot forge a protocol line either.
    forged = await box.run("import os\nos.write(1, b'{\"op\": \"done\", \"value\": 666}\\n')\n7")
    assert forged["value"] == 7


async def test_closing_kills_the_sandbox_and_every_process_it_started(box):
    await box.run("import subprocess\nchild = subprocess.Popen(['sleep', '300'])")
    pid = box.pid
    tree = descendants(pid)
    assert len(tree) >= 3  # bwrap's init, the kernel, the sleep
    await box.close()
    assert not alive(pid) and not any(alive(p) for p in tree)
    with pytest.raises(Exception, match="closed"):
        await box.run("1")


async def test_tool_calls_from_code_go_to_the_bridge_with_the_parent_and_names():
    seen = []

    async def bridge(name, arguments, parent, call_id, index):
        seen.append((name, arguments, parent, call_id, index))
        if name == "refused.tool":
            return False, json.dumps({"error": "no"}), False
        if name == "send.tool":
            return False, json.dumps({"error": "needs a person"}), True
        return True, json.dumps({"got": arguments}), False

    sandbox = PythonSandbox(SandboxLimits(wall_seconds=20), bridge)
    try:
        result = await sandbox.run(
            "out = [tools.call('demo.get_record', id=i)['got']['id'] for i in range(3)]\n"
            "try:\n    tools.call('refused.tool')\nexcept tools.ToolError as e:\n"
            "    out.append(str(e))\n"
            "try:\n    tools.call('send.tool', text='hi')\nexcept tools.NeedsApproval:\n"
            "    out.append('asked')\n"
            "out", parent=17, call_id="call_5_0")
    finally:
        await sandbox.close()
    assert result["value"] == [0, 1, 2, '{"error": "no"}', "asked"]
    assert result["tool_calls"] == 5
    assert result["needs_approval_not_run"] == [{"tool": "send.tool",
                                                 "arguments": {"text": "hi"}}]
    assert [(s[2], s[3], s[4]) for s in seen] == [(17, "call_5_0", n) for n in range(1, 6)]
