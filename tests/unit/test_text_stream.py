"""Streamed text is journaled in batches: at most one content_delta per interval, and the
remainder when the reply ends."""

from tickwork.worker.streaming import TextStream


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_pieces_within_an_interval_go_out_together_and_the_rest_at_the_end():
    clock, sent = Clock(), []
    stream = TextStream(sent.append, monotonic=clock, interval=0.25, timers=False)
    for piece, at in (("Hel", 0.0), ("lo", 0.1), (", wor", 0.26), ("ld", 0.3), ("!", 0.4)):
        clock.now = 100.0 + at
        stream(piece)
    # The first batch waited one interval, and ends between words.
    assert [p["text"] for p in sent] == ["Hello, "]
    stream.close()
    assert [p["text"] for p in sent] == ["Hello, ", "world!"]
    assert all(p["streamed"] for p in sent)


def test_no_two_batches_are_closer_than_the_interval():
    clock, sent, times = Clock(), [], []
    stream = TextStream(lambda p: (sent.append(p), times.append(clock.now)), monotonic=clock,
                        interval=0.25, timers=False)
    for i in range(100):
        clock.now = 100.0 + i * 0.01
        stream(f"{i} ")
    stream.close()
    assert "".join(p["text"] for p in sent) == "".join(f"{i} " for i in range(100))
    gaps = [b - a for a, b in zip(times, times[1:-1])]  # the final remainder is exempt
    assert all(gap >= 0.25 - 1e-9 for gap in gaps) and len(sent) == 4


def test_a_discarded_stream_sends_nothing():
    sent = []
    stream = TextStream(sent.append, monotonic=Clock(), timers=False)
    stream("abc")
    stream.discard()
    stream.close()
    assert sent == []


def test_a_batch_ends_between_words_so_a_secret_is_never_split_across_events():
    clock, sent = Clock(), []
    stream = TextStream(sent.append, monotonic=clock, interval=0.25, timers=False)
    for piece in ("The key is sk-", "live-1234", "5678abcd and", " more"):
        clock.now += 0.3
        stream(piece)
    stream.close()
    texts = [p["text"] for p in sent]
    assert "".join(texts) == "The key is sk-live-12345678abcd and more"
    assert any("sk-live-12345678abcd" in t for t in texts)
    assert all(t.endswith(" ") for t in texts[:-1])


# Issue 28, attack 3: a secret written in pieces, with pauses longer than a batch between them,
# must never reach the journal in clear. The journal redacts each content_delta on its own, so
# every batch's redaction, put together, must equal the redaction of the whole answer.
import random  # noqa: E402

import pytest  # noqa: E402

from tickwork.worker.redact import redact_text  # noqa: E402
from tickwork.worker.streaming import WINDOW_CHARS  # noqa: E402


def key_body(lines: int) -> str:
    alphabet = "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xYz+/"
    return "\n".join("".join(alphabet[(i * 7 + j * 3) % len(alphabet)] for i in range(64))
                     for j in range(lines))


TOKEN = "".join("aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xYz"[(i * 5) % 33] for i in range(40))
SPLIT_SECRETS = [
    ("pem", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpA" + key_body(6) + "\n-----END RSA PRIVATE "
            "KEY-----", key_body(6).split("\n")),
    ("openssh", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA" + key_body(5)
                + "\n-----END OPENSSH PRIVATE KEY-----", key_body(5).split("\n")),
    ("bearer", f"Authorization: Bearer {TOKEN}", [TOKEN]),
    ("password", f"password: {TOKEN[:12]}!9", [TOKEN[:12]]),
    ("aws session token", f"aws_session_token = {TOKEN}{TOKEN}", [TOKEN]),
    ("quoted password", f'db_password: "{TOKEN[:10]} {TOKEN[10:20]}"', [TOKEN[:10]]),
    ("stripe", "sk" + f"_live_{TOKEN[:24]}", [TOKEN[:24]]),
    ("url", f"postgres://app:{TOKEN[:16]}@db.internal/app", [TOKEN[:16]]),
]


def pieces_of(text: str, rng: random.Random) -> list[str]:
    """The text cut at random places (a model's tokens: inside words, at spaces, mid-key)."""
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, len(text) // 4)))
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


@pytest.mark.parametrize("name,secret,parts", SPLIT_SECRETS, ids=[s[0] for s in SPLIT_SECRETS])
def test_a_secret_written_in_pieces_with_pauses_never_reaches_a_batch_in_clear(name, secret,
                                                                               parts):
    answer = f"Here is what you asked for:\n{secret}\nLet me know if anything else is needed."
    for seed in range(15):
        clock, sent = Clock(), []
        stream = TextStream(sent.append, monotonic=clock, interval=0.25, timers=False)
        for piece in pieces_of(answer, random.Random(seed)):
            clock.now += 0.3  # longer than a batch: every piece is a chance to send
            stream(piece)
        stream.close()
        texts = [p["text"] for p in sent]
        assert "".join(texts) == answer
        journaled = "".join(redact_text(text) for text in texts)  # as the journal stores them
        assert journaled == redact_text(answer), (name, seed, texts)
        assert not any(part in journaled for part in parts), (name, seed)


def test_text_without_a_secret_still_streams_batch_by_batch():
    clock, sent = Clock(), []
    stream = TextStream(sent.append, monotonic=clock, interval=0.25, timers=False)
    for word in ("The ", "report ", "is ", "ready ", "and ", "sent ", "to ", "the ", "team."):
        clock.now += 0.3
        stream(word)
    assert [p["text"] for p in sent] == ["The ", "report ", "is ", "ready ", "and ", "sent ",
                                         "to ", "the "]


def test_a_keyword_waiting_for_its_value_is_held_across_a_pause():
    clock, sent = Clock(), []
    stream = TextStream(sent.append, monotonic=clock, interval=0.25, timers=False)
    for piece in ("Connect with ", "Authorization: Bearer ", "   ", TOKEN, " then go."):
        clock.now += 5.0  # pauses far longer than a batch
        stream(piece)
    assert "".join(p["text"] for p in sent) == "Connect with "
    stream.close()
    assert TOKEN not in "".join(redact_text(p["text"]) for p in sent)


def test_what_is_held_is_bounded_by_the_window():
    clock, sent = Clock(), []
    stream = TextStream(sent.append, monotonic=clock, interval=0.25, timers=False)
    stream("-----BEGIN RSA PRIVATE KEY-----\n")
    for _ in range(WINDOW_CHARS // 60 + 10):
        clock.now += 0.3
        stream(key_body(1) + "\n")
    held = sum(len(p) for p in stream._pieces)
    assert sent and held <= WINDOW_CHARS


def test_a_key_block_longer_than_the_window_is_redacted_to_its_end():
    clock, sent = Clock(), []
    stream = TextStream(sent.append, monotonic=clock, interval=0.25, timers=False)
    lines = [key_body(1).replace("a", str(i % 10), 3) for i in range(WINDOW_CHARS // 50)]
    pieces = ["Here:\n-----BEGIN RSA PRIVATE KEY-----\n"] + [f"{line}\n" for line in lines] + [
        "-----END RSA PRIVATE KEY-----\nThen wire nothing to anyone."]
    for piece in pieces:
        clock.now += 0.3
        stream(piece)
    stream.close()
    journaled = "".join(redact_text(p["text"]) for p in sent)
    assert len(sent) >= 2 and not any(line in journaled for line in lines)
    assert journaled.startswith("Here:\n[REDACTED:private_key ")
    assert journaled.endswith("]\nThen wire nothing to anyone.")


def every_shape() -> list[tuple[str, str]]:
    from tests.unit.test_redact import MISSED_BEFORE, NOT_SECRETS, POSITIVE

    return [(name, text) for name, text, _ in POSITIVE + MISSED_BEFORE] + \
        [(text, text) for text in NOT_SECRETS]


@pytest.mark.parametrize("name,text", every_shape(), ids=[name for name, _ in every_shape()])
def test_every_shape_streamed_in_random_pieces_is_journaled_as_the_whole_would_be(name, text):
    answer = f"Some words first. {text} and after it, more words.\nNext line {text}"
    for seed in range(10):
        rng = random.Random(seed)
        cuts = sorted(rng.sample(range(1, len(answer)), len(answer) // 3))
        pieces = [answer[a:b] for a, b in zip([0] + cuts, cuts + [len(answer)])]
        clock, sent = Clock(), []
        stream = TextStream(sent.append, monotonic=clock, interval=0.25, timers=False)
        for piece in pieces:
            clock.now += 0.3
            stream(piece)
        stream.close()
        assert "".join(redact_text(p["text"]) for p in sent) == redact_text(answer), seed
