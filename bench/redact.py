"""Redaction's cost per journal event: the redaction before this round, the current one, and
(when importable) the floor of detect-secrets' own regexes on the same text.

    .venv/bin/python bench/redact.py                 # ~20 s
    .venv/bin/python bench/redact.py --repeat 3 --before-commit b64d171

The payloads are what a run journals: turn markers, model text, tool arguments, a page of
records from a tool, an offloaded-result preview, model usage, and a few events that do hold
secrets. "before" is worker/redact.py as of --before-commit, loaded from git; "after" is the
working tree's. detect-secrets is not a dependency: put it on PYTHONPATH to include it (its
figure is only a floor: each plugin's regex over each line, without its keyword and entropy
plugins or its filters). Last line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load_before(commit: str) -> types.ModuleType:
    source = subprocess.run(["git", "show", f"{commit}:worker/redact.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("redact_before")
    exec(compile(source, f"redact@{commit}", "exec"), module.__dict__)
    return module


def load_after() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("redact_after", ROOT / "worker" / "redact.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake(n: int) -> str:
    alphabet = "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xYz"
    return "".join(alphabet[(i * 7) % len(alphabet)] for i in range(n))


def plain_events() -> list:
    """What most of a journal is: nothing to redact."""
    records = [{"id": i, "title": f"Record {i}", "category": "invoice", "amount": 120.5 + i,
                "created": f"2026-06-{1 + i % 28:02d}T10:00:00Z", "owner": str(uuid.UUID(int=i)),
                "body": f"Record {i} is an invoice opened on day {i % 28}; priority {i % 4}."}
               for i in range(20)]
    prose = ("I looked at the open invoices for June. Three are overdue by more than a week; "
             "the largest is record 12 at 1,240.50. I will draft a reminder for its owner and "
             "list the others in my answer with their due dates. ") * 2
    return [
        {"turn": 3},
        {"text": prose},
        {"text": "Let me check the records first, then summarise what changed since Monday."},
        {"tool": "demo.search_records", "call_id": "c_" + uuid.uuid4().hex[:12],
         "arguments": {"query": "overdue invoices", "limit": 20, "category": "invoice"}},
        {"tool": "demo.search_records", "call_id": "c_1", "ok": True, "result_chars": 2400,
         "duration_ms": 12.5, "result": json.dumps(records)},
        records,  # a tool's value as the toolbox redacts it, before it is rendered
        {"offloaded": True, "file_ref": "f_" + uuid.uuid4().hex, "chars": 48000,
         "preview": json.dumps(records)[:1500]},
        {"input_tokens": 1830, "output_tokens": 212, "model": "gpt-4o-mini", "turn": 3},
        {"verdict": "continue", "reason": "the plan has open steps", "units_left": 19},
    ]


def secret_events() -> list[dict]:
    return [
        {"text": f"Use {'sk-'}proj-{fake(48)} and password: hunter2x to log in."},
        {"tool": "demo.send_message", "arguments": {
            "to": "ops@example.com", "text": f"db is postgres://app:{fake(12)}@db:5432/app, "
                                             f"token {'gh'}p_{fake(36)}"}},
    ]


def per_event_us(redact, events: list[dict], seconds: float) -> float:
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for event in events:
            redact(event)
        count += len(events)
    return (time.perf_counter() - started) / count * 1e6


def detect_secrets_floor():
    """A redact-like function running each detect-secrets regex plugin over each line, or None."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:
        return None
    regexes = [regex for cls in get_mapping_from_secret_type_to_class().values()
               if issubclass(cls, RegexBasedDetector) for regex in cls().denylist]

    def scan(value):
        if isinstance(value, str):
            for line in value.splitlines():
                for regex in regexes:
                    regex.findall(line)
        elif isinstance(value, dict):
            for item in value.values():
                scan(item)
        elif isinstance(value, list):
            for item in value:
                scan(item)
        return value
    return scan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-commit", default="b64d171")
    parser.add_argument("--seconds", type=float, default=1.5, help="per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    args = parser.parse_args()
    before, after = load_before(args.before_commit), load_after()
    contenders = {"before": before.redact, "after": after.redact}
    floor = detect_secrets_floor()
    if floor is not None:
        contenders["detect_secrets_regex_floor"] = floor
    figures: dict[str, dict[str, float]] = {}
    for label, events in (("plain", plain_events()), ("with_secrets", secret_events())):
        for name, redact in contenders.items():
            best = min(per_event_us(redact, events, args.seconds) for _ in range(args.repeat))
            figures.setdefault(label, {})[f"{name}_us_per_event"] = round(best, 2)
            print(f"{label:>13}  {name:<28} {best:8.2f} us/event", flush=True)
    leaks = [event for event in secret_events() if json.dumps(after.redact(event)) ==
             json.dumps(event)]
    print(json.dumps({"bench": "redact", "before_commit": args.before_commit, **figures,
                      "plain_speedup": round(figures["plain"]["before_us_per_event"]
                                             / figures["plain"]["after_us_per_event"], 2),
                      "secret_events_left_unchanged": len(leaks)}), flush=True)


if __name__ == "__main__":
    main()
