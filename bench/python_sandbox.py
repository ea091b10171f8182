"""run_python's sandbox: what it costs to start, to call, to call a tool from code, and to keep.

No database: the sandbox alone (worker/tools/python_sandbox.py), bubblewrap and a kernel each,
with a bridge that answers tool calls at once (so the figure is the sandbox's own overhead;
a real tool call adds the journal and the tool). Memory is PSS (shared pages split between the
processes sharing them), summed over every process of a sandbox, with N sandboxes kept at once.

    .venv/bin/python bench/python_sandbox.py [--starts 20] [--calls 300] [--kept 20]

Prints readable lines; the last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from tickwork.worker.tools.python_sandbox import PythonSandbox, SandboxLimits


async def answer(name, arguments, parent, call_id, index):
    return True, json.dumps({"id": arguments.get("id")}), False


def tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--kept", type=int, default=20)
    args = parser.parse_args()
    limits = SandboxLimits()

    starts = []
    for _ in range(args.starts):
        sandbox = PythonSandbox(limits)
        began = time.perf_counter()
        await sandbox.run("1")
        starts.append((time.perf_counter() - began) * 1000)
        await sandbox.close()
    print(f"start + first cell: median {statistics.median(starts):.1f} ms, "
          f"max {max(starts):.1f} ms over {args.starts}")

    sandbox = PythonSandbox(limits, answer)
    await sandbox.run("x = 0")
    cells = []
    for _ in range(args.calls):
        began = time.perf_counter()
        await sandbox.run("x += 1\nx")
        cells.append((time.perf_counter() - began) * 1000)
    print(f"one cell on a kept sandbox: median {statistics.median(cells):.3f} ms")
    began = time.perf_counter()
    result = await sandbox.run(f"[tools.call('demo.get_record', id=i)['id'] "
                               f"for i in range({args.calls * 10})][-1]")
    per_tool = (time.perf_counter() - began) * 1000 / (args.calls * 10)
    assert result["value"] == args.calls * 10 - 1, result
    print(f"tools.call from code (bridge answering at once): {per_tool:.3f} ms per call")
    await sandbox.close()

    kept = [PythonSandbox(limits) for _ in range(args.kept)]
    for box in kept:
        await box.run("import json, re, collections\ndata = list(range(1000))")
    per = [sum(pss_kib(pid) for pid in tree(box.pid)) for box in kept]
    processes = len(tree(kept[0].pid))
    for box in kept:
        await box.close()
    per_mib = statistics.mean(per) / 1024
    print(f"kept sandbox memory (PSS, {args.kept} kept, {processes} processes each): "
          f"{per_mib:.1f} MiB each")
    available = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) // 1024
    print(f"MemAvailable {available} MiB: room for about {int(available / per_mib)} kept "
          "sandboxes (one per running run; the worker's concurrency bounds them)")
    print(json.dumps({"start_ms_median": round(statistics.median(starts), 1),
                      "start_ms_max": round(max(starts), 1),
                      "cell_ms_median": round(statistics.median(cells), 3),
                      "tool_call_from_code_ms": round(per_tool, 3),
                      "kept_sandbox_pss_mib": round(per_mib, 2),
                      "processes_per_sandbox": processes,
                      "mem_available_mib": available,
                      "sandboxes_fitting_in_available_memory": int(available / per_mib)}))


if __name__ == "__main__":
    asyncio.run(main())
