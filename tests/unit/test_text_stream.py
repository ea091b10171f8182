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
