"""jsonb is read with orjson where it reads exactly what the standard library reads, and by the
standard library otherwise (sql/db.py load_json)."""

from __future__ import annotations

import json

import pytest

from tickwork.sql.db import load_json

TEXTS = [
    '{"script": [{"text": "ok"}], "judge": ["done"]}',
    '{"a": 123456789012345678}',  # 18 digits: exact either way
    '{"a": 123456789012345678901234567890}',  # orjson would make this a float
    '{"a": 18446744073709551616}',  # 2**64
    '{"a": -9223372036854775809}',  # under the smallest 64-bit integer
    '{"a": 0.1234567890123456789}',
    '{"a": 1' + "0" * 400 + '}',  # what jsonb gives back for 1e400
    '{"s": "caf\\u00e9 \\u2028 \\ud83d\\ude00 \\n"}',
    '[1, 2.5, -0.0, true, false, null, "x", {}, []]',
]


@pytest.mark.parametrize("text", TEXTS)
def test_jsonb_reads_exactly_what_the_standard_library_reads(text):
    for data in (text, text.encode()):
        loaded = load_json(data)
        assert loaded == json.loads(text)
        assert json.dumps(loaded) == json.dumps(json.loads(text))  # types too (int stays int)
